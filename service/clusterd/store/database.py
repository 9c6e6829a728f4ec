"""The store's connection to its database: SQLAlchemy Core on threads of the store's own.

SQLAlchemy's engine is synchronous; every store call runs one transaction on one of the store's
threads (:meth:`Database.read`, :meth:`Database.write`), so the event loop never blocks on SQL and
store calls never queue behind the loop's shared worker threads. SQLite has one thread and one
connection (its one writer serializes everything anyway); PostgreSQL as many threads as pooled
connections.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Connection

from clusterd.store.dialects import DURABLE, WRITE, Dialect

T = TypeVar("T")
Durable = bool | Callable[[Connection], bool]


class Database:
    """One engine and the threads that use it."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._threads = ThreadPoolExecutor(max_workers=dialect.workers, thread_name_prefix=f"store-{dialect.name}")

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)`` in a read transaction (one snapshot for all of its queries)."""
        return await self.run(self._transaction, fn, False, False)

    async def write(self, fn: Callable[[Connection], T], *, durable: Durable = False) -> T:
        """``fn(conn)`` in a write transaction, committed when it returns, synced to disk if ``durable``
        (or if ``durable(conn)``, asked on the same connection just before the write begins)."""
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
