"""open_store picks the store from [store]; a bad url is a ConfigError naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterd.config import ConfigError, load_config
from clusterd.store.dialects import PostgresDialect, SqliteDialect
from clusterd.store.factory import open_store


async def test_empty_url_is_sqlite_under_the_state_dir(tmp_path: Path) -> None:
    config = load_config(environ={}, overrides={"state_dir": str(tmp_path)})
    store = open_store(config)
    try:
        assert isinstance(store.db.dialect, SqliteDialect)
        await store.open()
        assert (tmp_path / "clusterd.sqlite3").exists()
    finally:
        await store.close()


async def test_a_postgresql_url_is_the_shared_store(tmp_path: Path) -> None:
    config_file = tmp_path / "clusterd.toml"
    config_file.write_text('[store]\nurl = "postgresql:///clusterd?host=/run/postgresql"\npool_min = 1\npool_max = 4\n')
    config = load_config(config_file, environ={})
    assert (config.store.pool_min, config.store.pool_max) == (1, 4)
    store = open_store(config)
    assert isinstance(store.db.dialect, PostgresDialect)
    await store.close()  # never opened: nothing to close, nothing connected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CLUSTERD_STORE__URL": "mysql://db/clusterd"}, r"store.url: expected empty .* got scheme 'mysql'"),
        ({"CLUSTERD_STORE__URL": "/var/lib/db"}, r"store.url: expected empty"),
        ({"CLUSTERD_STORE__POOL_MIN": "0"}, r"store.pool_min/pool_max: need 1 <= pool_min <= pool_max, got 0/20"),
        ({"CLUSTERD_STORE__POOL_MIN": "5", "CLUSTERD_STORE__POOL_MAX": "4"}, r"got 5/4"),
    ],
)
def test_bad_store_settings_are_config_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(environ=env)


def test_a_url_libpq_cannot_parse_is_a_config_error() -> None:
    config = load_config(environ={"CLUSTERD_STORE__URL": "postgresql:///db?nosuch=1"})
    with pytest.raises(ConfigError, match=r'store.url: not a valid PostgreSQL connection URL: .*"nosuch"'):
        open_store(config)
