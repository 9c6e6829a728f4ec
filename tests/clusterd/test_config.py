from __future__ import annotations

from pathlib import Path

import pytest

from clusterd.auth.tokens import TokenFileError, parse_tokens
from clusterd.config import ConfigError, load_config


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('listen = "127.0.0.1:1"\npoll_interval_seconds = 5\n[slurm]\ndefault_partition = "debug"\n')
    cfg = load_config(
        path,
        environ={"CLUSTERD_SLURM__DEFAULT_PARTITION": "batch", "CLUSTERD_LISTEN": "x:2"},
        overrides={"listen": "127.0.0.1:3", "state_dir": None},
    )
    assert cfg.listen == "127.0.0.1:3"
    assert cfg.poll_interval_seconds == 5.0
    assert cfg.slurm.default_partition == "batch"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lisen = 1", "unknown config key 'lisen'"),
        ("[slurm]\nbogus = 1", "slurm.bogus"),
        ("poll_interval_seconds = 'fast'", "poll_interval_seconds"),
        ("[limits", "not valid TOML"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path, environ={})


def test_missing_config_file_is_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.toml", environ={})


@pytest.mark.parametrize(
    "text",
    [
        '[[token]]\nuser = "a"\ntoken = "short"',
        '[[token]]\ntoken = "0123456789abcdef"',
        '[[token]]\nuser = "a"\ntoken = "0123456789abcdef"\nadmin = "yes"',
        "token = 3",
    ],
)
def test_bad_tokens_file(text: str) -> None:
    with pytest.raises(TokenFileError):
        parse_tokens(text)


def test_supervisor_progress_budgets(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[supervisor]\nprogress_max_keys = 50\nprogress_read_seconds = 0.5\n")
    cfg = load_config(path, environ={"CLUSTERD_SUPERVISOR__PROGRESS_RETRY_SECONDS": "7"})
    assert cfg.supervisor.progress_max_keys == 50 and cfg.supervisor.progress_read_seconds == 0.5
    assert cfg.supervisor.progress_retry_seconds == 7.0 and cfg.supervisor.progress_workers == 4
    path.write_text("[supervisor]\nprogress_max_key = 50\n")
    with pytest.raises(ConfigError, match=r"supervisor\.progress_max_key"):
        load_config(path, environ={})


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("goodput.interval_floor_seconds", "0", "goodput.interval_floor_seconds"),
        ("goodput.interval_ceiling_seconds", "nan", "goodput.interval_ceiling_seconds"),
        ("goodput.prior_node_mtbf_seconds", "-5", "goodput.prior_node_mtbf_seconds"),
        ("goodput.failure_window_seconds", "inf", "goodput.failure_window_seconds"),
        ("goodput.interval_floor_seconds", "99999999", "goodput.interval_floor_seconds"),  # above the ceiling
    ],
)
def test_a_bad_goodput_value_is_refused_at_load_by_name(key: str, value: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(environ={}, overrides={key: value})


def test_the_health_probe_command_is_an_argv(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[liveness]\nhealth_probe_command = ["/usr/sbin/node-check", "--gpu", "a b"]\n')
    assert load_config(path, environ={}).liveness.health_probe_command == ("/usr/sbin/node-check", "--gpu", "a b")
    env = {"CLUSTERD_LIVENESS__HEALTH_PROBE_COMMAND": "/bin/sh -c 'test ! -e /run/sick'"}
    assert load_config(environ=env).liveness.health_probe_command == ("/bin/sh", "-c", "test ! -e /run/sick")
    assert load_config(environ={}).liveness.health_probe_command == ()  # no probe


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[liveness]\nhealth_probe_command = "/bin/sh -c \'x"\n', "health_probe_command: No closing quotation"),
        ("[liveness]\nhealth_probe_command = [1]\n", "health_probe_command: expected a list of strings"),
        ("[liveness]\nhealth_probe_interval_seconds = 0\n", "liveness.health_probe_interval_seconds"),
        ("[liveness]\nhealth_event_seconds = -1\n", "liveness.health_event_seconds"),
    ],
)
def test_a_bad_health_probe_setting_is_refused_by_name(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=named):
        load_config(path, environ={})
