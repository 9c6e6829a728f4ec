"""Where SQLite and PostgreSQL must differ, and nothing else: connections, transaction flavours,
cross-replica locks, the clock, upserts and GLOB.

SQLite serves one replica from one file: a write transaction is BEGIN IMMEDIATE, which already
admits one writer at a time, so the locks PostgreSQL needs between replicas are no-ops there, and
its clock is this machine's. PostgreSQL is shared by several replicas: one user's reservations and
the event log's appends take transaction-level advisory locks, and lease times come from the
database's clock_timestamp(), so replicas with skewed clocks agree. The writes a submit's
acknowledgement rests on commit durably (SQLite synchronous=FULL, PostgreSQL synchronous_commit on);
the reconciler's many updates, which the next poll re-derives from Slurm, do not (NORMAL / off).
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, Float, create_engine, event, func, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION
from sqlalchemy.sql.elements import ColumnElement

# Advisory lock keys, two-int form (its key space is apart from the one-bigint form record locks use).
LOCK_SPACE = 0x434C5553  # "CLUS"
LOCK_MIGRATE = 1
LOCK_EVENTS = 2
LOCK_USER = 0x434C5554  # second space: (LOCK_USER, hashtext(user)) serializes one user's admissions

WRITE = "clusterd_write"  # execution options the begin hooks read
DURABLE = "clusterd_durable"
_SYNCHRONOUS = "clusterd_synchronous"  # a SQLite connection's PRAGMA synchronous, in its pool record's info


class Dialect(Protocol):
    """What the query layer asks of its database beyond SQLAlchemy Core."""

    name: str
    engine: Engine
    workers: int  # threads that run store calls (each holds at most one connection)

    def lock_user(self, conn: Connection, user: str) -> None:
        """Until commit, no other replica admits a submission of ``user``."""
        ...

    def lock_events(self, conn: Connection) -> None:
        """Until commit, no other replica appends events (seqs are then committed in order)."""
        ...

    def lock_migrations(self, conn: Connection) -> None:
        """Until commit, no other replica migrates."""
        ...

    def now(self) -> ColumnElement[float]:
        """Seconds since the epoch by the clock leases are timed with."""
        ...

    def insert(self, table: Any) -> sqlite.Insert | postgresql.Insert:
        """An INSERT that can say ON CONFLICT ... DO UPDATE."""
        ...

    def glob(self, column: ColumnElement[str], pattern: str) -> ColumnElement[bool]:
        """``column`` matches ``pattern`` as SQLite's GLOB matches (case-sensitive)."""
        ...


class SqliteDialect:
    """One file, one connection, one thread: the embedded store of a single replica.

    The files are the service's alone: directory 0700, database (and the -wal/-shm files SQLite
    creates with the database's mode) 0600.
    """

    name = "sqlite"
    workers = 1

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        _private(self.path)
        # WAL is a property of the file: set here, once, before any store thread connects (two
        # connections switching a new file's journal mode at once may get "database is locked").
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
        finally:
            db.close()
        self.engine = create_engine(
            f"sqlite:///{self.path}",
            pool_size=1,
            max_overflow=0,
            connect_args={"check_same_thread": False},
        )
        event.listen(self.engine, "connect", _sqlite_connect)
        event.listen(self.engine, "begin", _sqlite_begin)

    def lock_user(self, conn: Connection, user: str) -> None:
        """Nothing: the write transaction (BEGIN IMMEDIATE) already excludes every other writer."""

    def lock_events(self, conn: Connection) -> None:
        """Nothing: as :meth:`lock_user`."""

    def lock_migrations(self, conn: Connection) -> None:
        """Nothing: as :meth:`lock_user`."""

    def now(self) -> ColumnElement[float]:
        """This machine's clock: SQLite serves one replica, so there is no other."""
        return literal(time.time(), Float)

    def insert(self, table: Any) -> sqlite.Insert:
        return sqlite.insert(table)

    def glob(self, column: ColumnElement[str], pattern: str) -> ColumnElement[bool]:
        return column.op("GLOB", is_comparison=True)(pattern)


class PostgresDialect:
    """A pool of connections shared by a pool of threads; several replicas use one database."""

    name = "postgresql"

    def __init__(self, url: str, *, pool_min: int = 2, pool_max: int = 20) -> None:
        """Raises ValueError for a connection string libpq cannot parse (nothing connects yet), and
        ImportError without psycopg (imported only when PostgreSQL is configured)."""
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        try:
            conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"not a valid PostgreSQL connection URL: {exc}") from None
        self.url = url
        self.workers = pool_max
        self.engine = self.new_engine(pool_min, pool_max)
        event.listen(self.engine, "begin", _postgres_begin)

    def new_engine(self, pool_min: int, pool_max: int) -> Engine:
        """An engine on :attr:`url` (libpq's syntax, kept as the operator wrote it)."""
        import psycopg

        return create_engine(
            "postgresql+psycopg://",
            creator=lambda: psycopg.connect(self.url),
            pool_size=pool_min,
            max_overflow=pool_max - pool_min,
        )

    def lock_user(self, conn: Connection, user: str) -> None:
        conn.execute(select(func.pg_advisory_xact_lock(LOCK_USER, func.hashtext(user))))

    def lock_events(self, conn: Connection) -> None:
        conn.execute(select(func.pg_advisory_xact_lock(LOCK_SPACE, LOCK_EVENTS)))

    def lock_migrations(self, conn: Connection) -> None:
        conn.execute(select(func.pg_advisory_xact_lock(LOCK_SPACE, LOCK_MIGRATE)))

    def now(self) -> ColumnElement[float]:
        """The database's clock, so replicas with skewed clocks agree on a lease."""
        return func.extract("epoch", func.clock_timestamp()).cast(DOUBLE_PRECISION)

    def insert(self, table: Any) -> postgresql.Insert:
        return postgresql.insert(table)

    def glob(self, column: ColumnElement[str], pattern: str) -> ColumnElement[bool]:
        return column.op("~", is_comparison=True)(glob_to_regex(pattern))


def glob_to_regex(glob: str) -> str:
    """SQLite's GLOB as an anchored PostgreSQL regex: ``*``, ``?``, ``[...]`` (``[^...]``), case-sensitive."""
    out, i = ["^"], 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i + 1
            if j < len(glob) and glob[j] == "^":
                j += 1
            if j < len(glob) and glob[j] == "]":
                j += 1  # a ']' first in the set is literal
            while j < len(glob) and glob[j] != "]":
                j += 1
            if j >= len(glob):
                out.append("(?!)")  # an unclosed set matches nothing, as in SQLite
                break
            body, negate = glob[i + 1 : j], False
            if body.startswith("^"):
                body, negate = body[1:], True
            escaped = "".join("\\" + ch if ch in "\\[]^" else ch for ch in body)
            out.append(f"[{'^' if negate else ''}{escaped}]")
            i = j
        else:
            out.append(re.escape(c) if not c.isalnum() else c)
        i += 1
    out.append("$")
    return "".join(out)


def _private(path: Path) -> None:
    """Directory 0700 and database 0600, created so: never a moment readable by others."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):  # files of an older, laxer version
        if name.exists():
            os.chmod(name, 0o600)


def _sqlite_connect(dbapi: Any, record: Any) -> None:
    """Transactions are begun by :func:`_sqlite_begin`, not by the driver."""
    dbapi.isolation_level = None
    for pragma in ("busy_timeout=5000", "synchronous=NORMAL"):
        dbapi.execute(f"PRAGMA {pragma}")
    record.info[_SYNCHRONOUS] = "NORMAL"


def _sqlite_begin(conn: Connection) -> None:
    """A write takes the write lock at BEGIN (IMMEDIATE), so a read in it never has to upgrade; a
    durable one syncs the WAL at COMMIT (a PRAGMA inside a transaction would apply to the next). The
    driver runs these directly, and the PRAGMA only when a write's level differs from the
    connection's: a read never syncs, and SQLAlchemy's statement path costs more than the SQL."""
    options = conn.get_execution_options()
    record = conn.connection
    driver: Any = record.driver_connection
    if options.get(WRITE):
        level = "FULL" if options.get(DURABLE) else "NORMAL"
        if record.info.get(_SYNCHRONOUS) != level:
            driver.execute(f"PRAGMA synchronous={level}")
            record.info[_SYNCHRONOUS] = level
        driver.execute("BEGIN IMMEDIATE")
    else:
        driver.execute("BEGIN")


def _postgres_begin(conn: Connection) -> None:
    options = conn.get_execution_options()
    if options.get(WRITE) and not options.get(DURABLE):
        conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
