"""Store fixtures: ``store`` runs a test against both databases (SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from clusterd.store.store import Store, postgres_store, sqlite_store
from tests.support.postgres import SKIP_REASON, get_cluster


@pytest.fixture
def root_logging() -> Iterator[None]:
    """Puts the root logger back after a test runs ``clusterd``'s main(), which points it at the
    test's captured stderr: a later test's log lines would go to a closed stream."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture
def pg_url() -> str:
    """A fresh, empty database in the session's throwaway cluster."""
    cluster = get_cluster()
    if cluster is None:
        pytest.skip(SKIP_REASON)
    return cluster.new_database()


@pytest.fixture
async def pg_stores(pg_url: str) -> AsyncIterator[Callable[[], Store]]:
    """Makes PostgreSQL stores on one database (each its own pools: a replica); closes them after."""
    made: list[Store] = []

    def make() -> Store:
        made.append(postgres_store(pg_url, pool_min=1, pool_max=8))
        return made[-1]

    yield make
    for s in made:
        await s.close()


def _make(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return sqlite_store(tmp_path / "state" / "db.sqlite3")
    return postgres_store(request.getfixturevalue("pg_url"), pool_min=1, pool_max=8)


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[Store]:
    """The SQLite store alone, as clusterd makes it (group commit on)."""
    s = sqlite_store(tmp_path / "state" / "db.sqlite3")
    await s.open()
    yield s
    await s.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s = _make(request, tmp_path)
    await s.open()
    yield s
    await s.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Store, Store]]:
    """Two stores on one database, as two replicas (SQLite: two connections to one file)."""
    pair = [_make(request, tmp_path) for _ in range(2)]
    await asyncio.gather(*(s.open() for s in pair))
    yield pair[0], pair[1]
    for s in pair:
        await s.close()
