"""The store: job records, the event log and leases over one database, SQLite or PostgreSQL.

Each concern is its own object (:attr:`Store.jobs`, :attr:`Store.events`, :attr:`Store.leases`) and
the service hands each component only the one it uses. One query layer (SQLAlchemy Core) serves
both databases; where they must differ, store/dialects.py says how.
"""

from __future__ import annotations

from pathlib import Path

from clusterd.store import migrate
from clusterd.store.database import Database
from clusterd.store.dialects import Dialect, PostgresDialect, SqliteDialect
from clusterd.store.events import EventLog
from clusterd.store.jobs import JobRecords
from clusterd.store.leases import Leases
from clusterd.store.locks import AdvisoryLocks, LocalLocks, RecordLocks


class Store:
    """Not usable before :meth:`open` (which migrates); :meth:`close` at shutdown."""

    def __init__(self, dialect: Dialect, locks: RecordLocks, *, group_commit: bool = False) -> None:
        self.db = Database(dialect, group_commit=group_commit)
        self._locks = locks
        self.jobs = JobRecords(self.db, locks)
        self.events = EventLog(self.db)
        self.leases = Leases(self.db)

    async def open(self) -> None:
        """Bring the database to the newest revision (store/migrate.py); call once before anything else."""
        await self.db.write(lambda conn: migrate.upgrade(conn, self.db.dialect))

    async def close(self) -> None:
        await self._locks.close()
        await self.db.close()


def sqlite_store(path: str | Path, *, group_commit: bool = True) -> Store:
    """The embedded store of one replica, in the file ``path`` (created private: 0600 in a 0700 directory);
    its writes are group-committed (store/database.py) unless ``group_commit`` is False."""
    return Store(SqliteDialect(path), LocalLocks(), group_commit=group_commit)


def postgres_store(url: str, *, pool_min: int = 2, pool_max: int = 20) -> Store:
    """The store several replicas share; raises ValueError for a URL libpq cannot parse."""
    dialect = PostgresDialect(url, pool_min=pool_min, pool_max=pool_max)
    return Store(dialect, AdvisoryLocks(dialect, pool_max))
