"""Bring the store's database to the newest revision when clusterd opens it (Alembic).

Runs in ONE write transaction, after the dialect's migration lock (on PostgreSQL an advisory lock:
replicas that start together migrate once; the others wait for its commit and find nothing to do).
A database made before the store used Alembic (SQLite at user_version 6, PostgreSQL with
schema_migrations at version 2) has exactly the baseline revision's schema: it is stamped at the
baseline, keeping its rows, and upgraded from there. Upgrades only: there are no downgrades.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text

from clusterd.store.dialects import Dialect
from clusterd.store.migrations import MigrationError

MIGRATIONS = Path(__file__).with_name("migrations")
BASELINE = "0001"


class StoreVersionError(MigrationError):
    """The database was made by a release this one cannot adopt (clusterd exits 1 naming its version)."""


def alembic_config(conn: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    return config


def head() -> str:
    """The newest revision."""
    revision = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert revision is not None
    return revision


def upgrade(conn: Connection, dialect: Dialect) -> None:
    """Adopt a database of an earlier release, then apply every revision it lacks (in the caller's transaction)."""
    dialect.lock_migrations(conn)
    tables = set(inspect(conn).get_table_names())
    config = alembic_config(conn)
    if "alembic_version" not in tables and "jobs" in tables:
        _check_adoptable(conn, dialect.name)
        command.stamp(config, BASELINE)
    command.upgrade(config, "head")


def _check_adoptable(conn: Connection, dialect: str) -> None:
    """The only pre-Alembic schema adopted is the one the baseline revision creates."""
    if dialect == "sqlite":
        version = int(conn.exec_driver_sql("PRAGMA user_version").scalar_one())
        want = 6
    else:
        version = int(conn.execute(text("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")).scalar_one())
        want = 2
    if version != want:
        raise StoreVersionError(
            f"the {dialect} store database is at schema version {version}, which this release cannot adopt "
            f"(it adopts version {want}); open it once with the release that made it current, then upgrade"
        )
