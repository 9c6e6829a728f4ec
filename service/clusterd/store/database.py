"""The store's connection to its database: SQLAlchemy Core on threads of the store's own.

SQLAlchemy's engine is synchronous; every store call runs one transaction on one of the store's
threads (:meth:`Database.read`, :meth:`Database.write`), so the event loop never blocks on SQL and
store calls never queue behind the loop's shared worker threads. SQLite has one thread and one
connection, which that thread keeps open (its one writer serializes everything anyway; a checkout
per call costs more Python than a submit's statements); PostgreSQL as many threads as pooled
connections, each call checking one out.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Connection

from clusterd.store.dialects import DURABLE, WRITE, Dialect

T = TypeVar("T")
Durable = bool | Callable[[Connection], bool]
READ = {WRITE: False, DURABLE: False}  # a connection's options outlive a call: each transaction sets its own


class Database:
    """One engine and the threads that use it; with ``group_commit`` (one thread only), writes asked
    for while the thread is busy share a transaction (:class:`GroupCommit`)."""

    def __init__(self, dialect: Dialect, *, group_commit: bool = False) -> None:
        self.dialect = dialect
        self._threads = ThreadPoolExecutor(max_workers=dialect.workers, thread_name_prefix=f"store-{dialect.name}")
        assert not group_commit or dialect.workers == 1, "a group commit needs the store's one thread"
        self._held: Connection | None = None  # the one thread's connection (workers == 1), opened on first use
        self._group = GroupCommit(self.connection, self._threads) if group_commit else None

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection for one store call, on a store thread: the one thread's own, else one from the pool."""
        if self.dialect.workers > 1:
            with self.dialect.engine.connect() as conn:
                yield conn
            return
        if self._held is None or self._held.closed:
            self._held = self.dialect.engine.connect()
        yield self._held

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
        with self.connection() as conn:
            if callable(durable):
                conn.execution_options(**READ)
                with conn.begin():
                    durable = durable(conn)
            conn.execution_options(**{WRITE: write, DURABLE: durable})
            with conn.begin():
                return fn(conn)

    async def close(self) -> None:
        await self.run(self._close)
        self._threads.shutdown(wait=False)

    def _close(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None
        self.dialect.engine.dispose()


class GroupCommit:
    """SQLite's writes share commits: those queued while the store's one thread was busy run in one
    transaction, each in a savepoint (one write's error undoes it alone), and pay one sync between
    them where one of them asked for it. 16 concurrent submits then pay about one sync, not 16 in a
    row (bench/store.py). Every write answers after its group's commit (synced where durable)."""

    def __init__(
        self, connection: Callable[[], contextlib.AbstractContextManager[Connection]], thread: ThreadPoolExecutor
    ) -> None:
        self._connection = connection
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
            with self._connection() as conn:
                asks = [durable for _, _, durable, _ in queued]
                durable = any(d is True for d in asks)
                if not durable and any(callable(d) for d in asks):
                    conn.execution_options(**READ)
                    with conn.begin():
                        durable = any(d(conn) for d in asks if callable(d))
                conn.execution_options(**{WRITE: True, DURABLE: durable})
                with conn.begin():
                    if len(queued) == 1:  # alone, its error undoes the transaction: no savepoint to pay for
                        context, fn, _, _ = queued[0]
                        outcomes.append((context.run(fn, conn), None))
                    else:
                        for context, fn, _, _ in queued:
                            outcomes.append(_part(conn, context, fn))
        except Exception as exc:  # the group's transaction failed: none of its writes stand
            outcomes = [(None, exc)] * len(queued)
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
            loop.call_soon_threadsafe(_settle, [done for _, _, _, done in queued], outcomes)


def _part(
    conn: Connection, context: contextvars.Context, fn: Callable[[Connection], Any]
) -> tuple[Any, BaseException | None]:
    """``fn(conn)`` in a savepoint of the group's transaction: its error undoes it alone. The driver
    runs the savepoint's statements: SQLAlchemy's nested transaction compiles each one anew, which
    cost a third of the store thread's time with 16 writes a group."""
    driver = conn.connection.driver_connection
    assert driver is not None
    driver.execute("SAVEPOINT part")
    try:
        value = context.run(fn, conn)
    except Exception as exc:
        driver.execute("ROLLBACK TO part")  # raises where SQLite rolled the whole group back: all fail
        driver.execute("RELEASE part")
        return None, exc
    driver.execute("RELEASE part")
    return value, None


def _settle(waiting: list[asyncio.Future[Any]], outcomes: list[tuple[Any, BaseException | None]]) -> None:
    """Answer a group's callers (one hop onto the loop for all of them)."""
    for done, (value, error) in zip(waiting, outcomes, strict=True):
        if done.cancelled():
            continue  # the caller went away; the write itself stands (or not) as its group did
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)
