"""The one place that picks a store implementation from the configuration."""

from __future__ import annotations

from clusterd.config import Config, ConfigError
from clusterd.store.base import JobStore
from clusterd.store.sqlite import SqliteJobStore


def open_store(config: Config) -> JobStore:
    """The configured store, not yet opened: the caller awaits ``store.open()`` before using it
    (PostgreSQL connects and migrates there) and ``store.close()`` at shutdown.

    Raises ConfigError for a [store] url the driver cannot parse.
    """
    if not config.store.url:
        return SqliteJobStore(config.db_path)
    try:
        from clusterd.store.postgres import PostgresJobStore  # psycopg is imported only when configured
    except ImportError as exc:
        need = "pip install 'clusterctl[service]'"
        raise ConfigError(f"store.url names PostgreSQL, which needs psycopg ({need}): {exc}") from None
    try:
        return PostgresJobStore(config.store.url, pool_min=config.store.pool_min, pool_max=config.store.pool_max)
    except ValueError as exc:
        raise ConfigError(f"store.url: {exc}") from None
