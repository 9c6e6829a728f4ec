"""Per-record locks held across one record's read-modify-write (reconciler versus RPC handlers).

SQLite's store serves one replica, so an asyncio.Lock per record is enough. With PostgreSQL, a
record lock is also a session advisory lock on a connection of a pool of its own, held until
release, so replicas exclude each other; that pool is apart from the query pool because holders run
queries while they hold it, and holders waiting for query connections must never be what keeps
those connections taken.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import weakref
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Protocol

from sqlalchemy import Connection, Engine, func, select

from clusterd.store.dialects import PostgresDialect


class RecordLock(Protocol):
    """Held across one record's read-modify-write (an asyncio.Lock satisfies it)."""

    def locked(self) -> bool:
        """Whether this process holds it now (the reconciler skips a record an RPC holds)."""
        ...

    async def __aenter__(self) -> object: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> object: ...


class RecordLocks(Protocol):
    def __call__(self, record_id: int) -> RecordLock: ...

    async def close(self) -> None: ...


class LocalLocks:
    """One asyncio.Lock per record, alive while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()

    def __call__(self, record_id: int) -> asyncio.Lock:
        lock = self._locks.get(record_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[record_id] = lock
        return lock

    async def close(self) -> None:
        """Nothing to release."""


class AdvisoryLocks:
    """Record locks across replicas: PostgreSQL session advisory locks on a pool of their own."""

    def __init__(self, dialect: PostgresDialect, pool_max: int) -> None:
        self._engine = dialect.new_engine(1, pool_max)
        self._threads = ThreadPoolExecutor(max_workers=pool_max, thread_name_prefix="store-locks")
        self._locks: weakref.WeakValueDictionary[int, AdvisoryLock] = weakref.WeakValueDictionary()

    def __call__(self, record_id: int) -> AdvisoryLock:
        lock = self._locks.get(record_id)
        if lock is None:
            lock = AdvisoryLock(self._engine, self._threads, record_id)
            self._locks[record_id] = lock
        return lock

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._threads, self._engine.dispose)
        self._threads.shutdown(wait=False)


class AdvisoryLock:
    """An in-process asyncio.Lock, then ``pg_advisory_lock(record_id)`` on a connection held until release."""

    def __init__(self, engine: Engine, threads: ThreadPoolExecutor, record_id: int) -> None:
        self._engine = engine
        self._threads = threads
        self._id = record_id
        self._lock = asyncio.Lock()
        self._conn: Connection | None = None

    def locked(self) -> bool:
        """Whether this process holds it (another replica's hold shows as waiting, not here)."""
        return self._lock.locked()

    async def __aenter__(self) -> AdvisoryLock:
        await self._lock.acquire()
        try:
            taking = self._threads.submit(self._take)
            try:
                self._conn = await asyncio.wrap_future(taking)
            except asyncio.CancelledError:
                taking.add_done_callback(_drop)  # taken after all: ending its session drops it
                raise
        except BaseException:
            self._lock.release()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                await asyncio.get_running_loop().run_in_executor(self._threads, self._give, conn)
        finally:
            self._lock.release()

    def _take(self) -> Connection:
        conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            conn.execute(select(func.pg_advisory_lock(self._id)))
        except BaseException:
            conn.invalidate()
            conn.close()
            raise
        return conn

    def _give(self, conn: Connection) -> None:
        try:
            conn.execute(select(func.pg_advisory_unlock(self._id)))
        except BaseException:
            conn.invalidate()  # its session ends, and the lock with it
            raise
        finally:
            conn.close()


def _drop(taking: concurrent.futures.Future[Connection]) -> None:
    if not taking.cancelled() and taking.exception() is None:
        conn = taking.result()
        conn.invalidate()
        conn.close()
