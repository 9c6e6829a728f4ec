"""make_backend: named backends, what 'auto' picks, and ConfigErrors that name slurm.backend."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path

import pytest

from clusterd.config import ConfigError, SlurmConfig
from clusterd.slurm import factory
from clusterd.slurm.commands import CommandsBackend
from clusterd.slurm.factory import make_backend
from clusterd.slurm.pyslurm_backend import PyslurmBackend
from clusterd.slurm.restd import RestdBackend


def test_commands_is_the_default() -> None:
    assert isinstance(make_backend(SlurmConfig()), CommandsBackend)


def test_unknown_backend_lists_the_available_ones() -> None:
    with pytest.raises(ConfigError, match=r"slurm\.backend: unknown backend 'sbatchd' \(available: commands, "):
        make_backend(SlurmConfig(backend="sbatchd"))


def test_pyslurm_unusable_is_a_config_error_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "_pyslurm_reason", lambda config: "pyslurm is not importable: ImportError: nope")
    with pytest.raises(ConfigError, match=r"slurm\.backend = 'pyslurm' cannot be used: pyslurm is not importable"):
        make_backend(SlurmConfig(backend="pyslurm"))


def test_pyslurm_on_this_machine_is_refused_with_a_real_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # as here: pyslurm is not installed
    with pytest.raises(ConfigError, match="pyslurm is not importable"):
        make_backend(SlurmConfig(backend="pyslurm"))


def test_auto_is_commands_without_a_restd_url_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="clusterd.slurm.factory"):
        assert isinstance(make_backend(SlurmConfig(backend="auto")), CommandsBackend)
    assert "slurm backend: commands (auto: slurm.restd_url is not set)" in caplog.text


def test_auto_is_slurmrestd_with_a_restd_url(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    token = tmp_path / "token"
    token.write_text("a.b.c\n")
    config = SlurmConfig(backend="auto", restd_url=f"unix://{tmp_path / 'restd.sock'}", jwt_token_file=str(token))
    assert config.chosen_backend == "slurmrestd"
    with caplog.at_level(logging.INFO, logger="clusterd.slurm.factory"):
        assert isinstance(make_backend(config), RestdBackend)
    assert "slurm backend: slurmrestd (auto: slurm.restd_url is set)" in caplog.text
    with pytest.raises(ConfigError, match=r"slurm\.backend = 'auto' \(slurmrestd: slurm\.restd_url is set\): "):
        make_backend(SlurmConfig(backend="auto", restd_url="ftp://nowhere"))


def test_auto_never_picks_pyslurm_even_when_it_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", types.ModuleType("pyslurm"))  # stand-in; no RPC is made
    monkeypatch.setattr(factory, "_pyslurm_reason", lambda config: None)
    assert isinstance(make_backend(SlurmConfig(backend="auto")), CommandsBackend)
    assert isinstance(make_backend(SlurmConfig(backend="pyslurm")), PyslurmBackend)  # only when named


def test_slurmrestd_is_built_lazily_and_its_config_errors_name_the_backend() -> None:
    with pytest.raises(ConfigError, match=r"slurm\.backend = 'slurmrestd'.*restd_url"):
        make_backend(SlurmConfig(backend="slurmrestd"))
