"""Store fixtures: ``store`` runs a test against both implementations (SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from clusterd.store.base import JobStore
from clusterd.store.postgres import PostgresJobStore
from clusterd.store.sqlite import SqliteJobStore
from tests.support.postgres import SKIP_REASON, get_cluster


@pytest.fixture
def pg_url() -> str:
    """A fresh, empty database in the session's throwaway cluster."""
    cluster = get_cluster()
    if cluster is None:
        pytest.skip(SKIP_REASON)
    return cluster.new_database()


@pytest.fixture
async def pg_stores(pg_url: str) -> AsyncIterator[Callable[[], PostgresJobStore]]:
    """Makes PostgresJobStores on one database (each its own pools: a replica); closes them after."""
    made: list[PostgresJobStore] = []

    def make() -> PostgresJobStore:
        made.append(PostgresJobStore(pg_url, pool_min=1, pool_max=8))
        return made[-1]

    yield make
    for s in made:
        await s.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[JobStore]:
    s: JobStore
    if request.param == "sqlite":
        s = SqliteJobStore(tmp_path / "state" / "db.sqlite3")
    else:
        s = PostgresJobStore(request.getfixturevalue("pg_url"), pool_min=1, pool_max=8)
    await s.open()
    yield s
    await s.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[JobStore, JobStore]]:
    """Two store instances on one database, as two replicas (SQLite: two connections to one file)."""
    pair: list[JobStore] = []
    for _ in range(2):
        if request.param == "sqlite":
            pair.append(SqliteJobStore(tmp_path / "state" / "db.sqlite3"))
        else:
            pair.append(PostgresJobStore(request.getfixturevalue("pg_url"), pool_min=1, pool_max=8))
    await asyncio.gather(*(s.open() for s in pair))
    yield pair[0], pair[1]
    for s in pair:
        await s.close()
