"""The one place that picks a store's database from the configuration."""

from __future__ import annotations

from clusterd.config import Config, ConfigError
from clusterd.store.store import Store, postgres_store, sqlite_store


def open_store(config: Config) -> Store:
    """The configured store, not yet opened: the caller awaits ``store.open()`` (which connects and
    migrates) before using it and ``store.close()`` at shutdown.

    Raises ConfigError for a [store] url the driver cannot parse.
    """
    if not config.store.url:
        return sqlite_store(config.db_path)
    try:
        return postgres_store(config.store.url, pool_min=config.store.pool_min, pool_max=config.store.pool_max)
    except ImportError as exc:
        need = "pip install 'clusterctl[service]'"
        raise ConfigError(f"store.url names PostgreSQL, which needs psycopg ({need}): {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"store.url: {exc}") from None
