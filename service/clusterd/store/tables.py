"""The store's tables as SQLAlchemy Core sees them at the newest revision (queries only).

The migrations under store/migrations create and change the tables; a revision never imports this
module, whose shape follows the newest revision. Specs live in their own table: a job row stays a
few hundred bytes however large its spec, so listing, counting and polling never read multi-MiB
blobs. A Slurm job id is not a key (Slurm reuses ids when slurmctld loses its state): a record is
its ``record_id``, and of the records holding one Slurm id exactly one is current (``superseded``
false), which a partial UNIQUE index enforces.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    Sequence,
    Table,
    Text,
    and_,
    false,
    literal_column,
    or_,
    true,
)
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION, JSONB
from sqlalchemy.sql.elements import ColumnElement

metadata = MetaData()

_ID = BigInteger().with_variant(Integer, "sqlite")  # SQLite's rowid alias must be INTEGER
_REAL = Float().with_variant(DOUBLE_PRECISION, "postgresql")
_JSON = JSON().with_variant(JSONB, "postgresql")

jobs = Table(
    "jobs",
    metadata,
    Column("record_id", _ID, primary_key=True, autoincrement=True),
    Column("user", Text, nullable=False),
    Column("request_id", Text, nullable=False),
    Column("job_id", Text),
    Column("phase", Text, nullable=False),
    Column("terminal", Boolean, nullable=False),
    Column("superseded", Boolean, nullable=False),
    Column("state", Text, nullable=False),
    Column("tasks", Integer, nullable=False),
    Column("spec_bytes", BigInteger, nullable=False),
    Column("created", _REAL, nullable=False),
    Column("updated", _REAL, nullable=False),
    Column("finished", _REAL),
    Column("observed", _JSON, nullable=False),
    sqlite_autoincrement=True,
)

specs = Table(
    "specs",
    metadata,
    Column("record_id", _ID, primary_key=True, autoincrement=False),
    Column("spec", LargeBinary, nullable=False),  # opaque: encoded and decoded by store/codec.py only
)

restarts = Table(
    "restarts",
    metadata,
    Column("record_id", _ID, primary_key=True, autoincrement=False),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("cause", Text, nullable=False),
    Column("nodes", Text, nullable=False),  # JSON list
    Column("time", _REAL, nullable=False),
    Column("step", BigInteger, nullable=False),
    Column("exit_code", Integer, nullable=False),
    Column("detail", Text, nullable=False),
    Column("nodes_before", Integer, nullable=False),
    Column("nodes_after", Integer, nullable=False),
    Column("detected_by", Text, nullable=False),
    Column("phases", Text, nullable=False),  # JSON object
)

# seq: SQLite's AUTOINCREMENT or PostgreSQL's events_seq; never reused after a prune.
events = Table(
    "events",
    metadata,
    Column("seq", _ID, Sequence("events_seq"), primary_key=True, autoincrement=True),
    Column("record_id", _ID, nullable=False),
    Column("type", Text, nullable=False),
    Column("previous_state", Text, nullable=False),
    Column("message", Text, nullable=False),
    Column("time", _REAL, nullable=False),
    Column("record", _JSON, nullable=False),
    sqlite_autoincrement=True,
)

leases = Table(
    "leases",
    metadata,
    Column("name", Text, primary_key=True),
    Column("holder", Text, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("expires", _REAL, nullable=False),  # seconds since the epoch, by the database's clock
)


# Constants are written into the SQL, not bound: a bound parameter is Python work on every execution.
_FAILED: ColumnElement[str] = literal_column("'failed'")


def live() -> ColumnElement[bool]:
    """True for a record the reconciler still follows: not terminal, not failed."""
    return and_(jobs.c.terminal == false(), jobs.c.phase != _FAILED)


def finished() -> ColumnElement[bool]:
    """True for a finished record: the complement of :func:`live`."""
    return or_(jobs.c.terminal == true(), jobs.c.phase == _FAILED)
