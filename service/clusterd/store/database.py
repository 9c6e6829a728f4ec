"""The store's connection to its database: SQLAlchemy Core on threads of the store's own.

SQLAlchemy's engine is synchronous; every store call runs one transaction on one of the store's
threads (:meth:`Database.read`, :meth:`Database.write`), so the event loop never blocks on SQL and
store calls never queue behind the loop's shared worker threads. SQLite has one thread and one
connection (its one writer serializes everything anyway); PostgreSQL as many threads as pooled
connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from clusterd.store.dialects import DURABLE, WRITE, Dialect

T = TypeVar("T")
Durable = bool | Callable[[Connection], bool]


class Database:
    """One engine and the threads that use it; with ``group_commit`` (one thread only), writes asked
    for while the thread is busy share a transaction (:class:`GroupCommit`)."""

    def __init__(self, dialect: Dialect, *, group_commit: bool = False) -> None:
        self.dialect = dialect
        self._threads = ThreadPoolExecutor(max_workers=dialect.workers, thread_name_prefix=f"store-{dialect.name}")
        assert not group_commit or dialect.workers == 1, "a group commit needs the store's one thread"
        self._group = GroupCommit(dialect.engine, self._threads) if group_commit else None

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)`` in a read transaction (one snapshot for all of its queries)."""
        return await self.run(self._transaction, fn, False, False)

    async def write(self, fn: Callable[[Connection], T], *, durable: Durable = False) -> T:
        """``fn(conn)`` in a write transaction, committed when it returns, synced to disk if ``durable``
        (or if ``durable(conn)``, asked on the same connection just before the write begins)."""
        if self._group is not None:
            return await self._group.write(fn, durable)
        return await self.run(self._transaction, fn, True, durable)

    async def run(self, fn: Callable[..., T], /, *args: Any) -> T:
        """``fn(*args)`` on a store thread, in the caller's context (its context vars ride along)."""
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    def _transaction(self, fn: Callable[[Connection], T], write: bool, durable: Durable) -> T:
        with self.dialect.engine.connect() as conn:
            if callable(durable):
                with conn.begin():
                    durable = durable(conn)
            conn.execution_options(**{WRITE: write, DURABLE: durable})
            with conn.begin():
                return fn(conn)

    async def close(self) -> None:
        await self.run(self.dialect.engine.dispose)
        self._threads.shutdown(wait=False)


class GroupCommit:
    """SQLite's writes share commits: those queued while the store's one thread was busy run in one
    transaction, each in a savepoint (one write's error undoes it alone), and pay one sync between
    them where one of them asked for it. 16 concurrent submits then pay about one sync, not 16 in a
    row (bench/store.py). Every write answers after its group's commit (synced where durable)."""

    def __init__(self, engine: Engine, thread: ThreadPoolExecutor) -> None:
        self._engine = engine
        self._thread = thread
        self._queued: list[tuple[contextvars.Context, Callable[[Connection], Any], Durable, asyncio.Future[Any]]] = []
        self._lock = threading.Lock()

    def write(self, fn: Callable[[Connection], T], durable: Durable) -> asyncio.Future[T]:
        """Queue ``fn`` for the next group: the one thread takes work in order, so whatever the loop
        asks of the store after this call runs after ``fn`` has committed."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queued.append((contextvars.copy_context(), fn, durable, done))
            first = len(self._queued) == 1
        if first:
            self._thread.submit(self._commit, loop)
        return done

    def _commit(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            queued, self._queued = self._queued, []
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            with self._engine.connect() as conn:
                asks = [durable for _, _, durable, _ in queued]
                durable = any(d is True for d in asks)
                if not durable and any(callable(d) for d in asks):
                    with conn.begin():
                        durable = any(d(conn) for d in asks if callable(d))
                conn.execution_options(**{WRITE: True, DURABLE: durable})
                with conn.begin():
                    for context, fn, _, _ in queued:
                        part = conn.begin_nested()
                        try:
                            value = context.run(fn, conn)
                        except Exception as exc:
                            part.rollback()  # raises where SQLite rolled the whole group back: all fail
                            outcomes.append((None, exc))
                        else:
                            part.commit()
                            outcomes.append((value, None))
        except Exception as exc:  # the group's transaction failed: none of its writes stand
            outcomes = [(None, exc)] * len(queued)
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
            for (_, _, _, done), (value, error) in zip(queued, outcomes, strict=True):
                loop.call_soon_threadsafe(_settle, done, value, error)


def _settle(done: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if done.cancelled():
        return  # the caller went away; the write itself stands (or not) as its group did
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(value)
