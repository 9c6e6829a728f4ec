"""PostgreSQL as several replicas see it: reservations racing across pools, record locks across
replicas, migrations run once however many start at once, and the GLOB filter as SQLite has it."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable

import psycopg
import pytest

from clusterd.errors import ResourceExhausted
from clusterd.model.spec import JobSpec
from clusterd.store import migrate
from clusterd.store.bounds import UserBounds
from clusterd.store.dialects import glob_to_regex
from clusterd.store.store import Store, postgres_store

Make = Callable[[], Store]


async def _two(make: Make) -> tuple[Store, Store]:
    a, b = make(), make()
    await asyncio.gather(a.open(), b.open())
    return a, b


async def test_a_request_id_reserved_on_two_replicas_at_once_is_one_job(pg_stores: Make) -> None:
    a, b = await _two(pg_stores)
    spec = JobSpec(command=["hostname"])
    for request_id in ("r1", "r2", "r3"):
        got = await asyncio.gather(*(s.jobs.reserve("alice", request_id, spec) for s in (a, b) * 6))
        assert sum(created for _, created in got) == 1
        assert len({rec.record_id for rec, _ in got}) == 1
    assert len(await a.jobs.live()) == 3


async def test_per_user_bounds_hold_across_replicas(pg_stores: Make) -> None:
    a, b = await _two(pg_stores)
    limits = UserBounds(max_live_tasks=5)

    async def one(store: Store, i: int) -> bool:
        try:
            await store.jobs.reserve("alice", f"r{i}", JobSpec(command=["x"]), limits=limits)
        except ResourceExhausted:
            return False
        return True

    got = await asyncio.gather(*(one((a, b)[i % 2], i) for i in range(12)))
    assert sum(got) == 5  # admitted one at a time: two replicas cannot both pass the last free slot


async def test_record_lock_excludes_across_replicas(pg_stores: Make) -> None:
    a, b = await _two(pg_stores)
    order: list[str] = []
    held = asyncio.Event()

    async def first() -> None:
        async with a.jobs.record_lock(7):
            order.append("a in")
            held.set()
            await asyncio.sleep(0.3)
            order.append("a out")

    async def second() -> None:
        await held.wait()
        lock = b.jobs.record_lock(7)
        assert not lock.locked()  # .locked() is this process's view: b holds nothing yet
        async with lock:
            assert lock.locked()
            order.append("b in")

    await asyncio.gather(first(), second())
    assert order == ["a in", "a out", "b in"]
    async with a.jobs.record_lock(8), b.jobs.record_lock(9):  # other records do not wait
        pass


async def test_a_cancelled_wait_for_a_record_lock_leaks_nothing(pg_stores: Make) -> None:
    a, b = await _two(pg_stores)
    async with a.jobs.record_lock(3):
        waiter = asyncio.create_task(b.jobs.record_lock(3).__aenter__())
        await asyncio.sleep(0.2)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    async with asyncio.timeout(5):
        async with b.jobs.record_lock(3):  # neither the in-process lock nor the advisory one was kept
            pass
        async with a.jobs.record_lock(3):
            pass


async def test_replicas_starting_together_migrate_once(pg_url: str) -> None:
    stores = [postgres_store(pg_url, pool_min=1, pool_max=2) for _ in range(4)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        assert [r[0] for r in rows] == [migrate.head()]
        await stores[1].open()  # idempotent
        rec, created = await stores[3].jobs.reserve("alice", "r", JobSpec(command=["x"]))
        assert created and await stores[0].jobs.get_by_record(rec.record_id) is not None
    finally:
        for s in stores:
            await s.close()


GLOBS = ["train*", "*-[0-9]", "job?", "[^a-m]*", "[]x]*", "a.b", "100%_*", "*", "x[a-c]y", "[!x]*", "w\\*", "[", "a[b"]
NAMES = [
    "train-1",
    "train",
    "job1",
    "jobs",
    "job",
    "zeta",
    "alpha",
    "]x",
    "xyz",
    "a.b",
    "axb",
    "100%_ok",
    "x-2",
    "!bang",
    "xby",
    "w\\x",
    "",
    "a[b",
    "line\nbreak",
]


async def test_the_name_glob_matches_what_sqlite_glob_matches(pg_url: str) -> None:
    lite = sqlite3.connect(":memory:")
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        for glob in GLOBS:
            want = {n for n in NAMES if lite.execute("SELECT ? GLOB ?", (n, glob)).fetchone()[0]}
            regex = glob_to_regex(glob)
            got = set()
            for name in NAMES:
                cur = await conn.execute("SELECT %s ~ %s", (name, regex))
                row = await cur.fetchone()
                if row is not None and row[0]:
                    got.add(name)
            assert got == want, (glob, regex)
