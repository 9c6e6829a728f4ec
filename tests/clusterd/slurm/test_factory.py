"""make_backend: named backends, 'auto' detection, and ConfigErrors that name slurm.backend."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from clusterd.config import ConfigError, SlurmConfig
from clusterd.slurm import factory
from clusterd.slurm.commands import CommandsBackend
from clusterd.slurm.factory import make_backend
from clusterd.slurm.pyslurm_backend import PyslurmBackend


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


def test_auto_falls_back_to_commands_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reason = "pyslurm 25.11.2 is built for Slurm 25.11 but this cluster runs 22.05.8"
    monkeypatch.setattr(factory, "_pyslurm_reason", lambda config: reason)
    with caplog.at_level(logging.INFO, logger="clusterd.slurm.factory"):
        assert isinstance(make_backend(SlurmConfig(backend="auto")), CommandsBackend)
    assert f"slurm backend: commands (auto: {reason})" in caplog.text


def test_auto_picks_pyslurm_when_it_matches(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", types.ModuleType("pyslurm"))  # stand-in; no RPC is made
    monkeypatch.setattr(factory, "_pyslurm_reason", lambda config: None)
    with caplog.at_level(logging.INFO, logger="clusterd.slurm.factory"):
        assert isinstance(make_backend(SlurmConfig(backend="auto")), PyslurmBackend)
        assert isinstance(make_backend(SlurmConfig(backend="pyslurm")), PyslurmBackend)
    assert "slurm backend: pyslurm (auto: pyslurm matches the running Slurm)" in caplog.text


def test_slurmrestd_is_built_lazily_and_its_config_errors_name_the_backend() -> None:
    with pytest.raises(ConfigError, match=r"slurm\.backend = 'slurmrestd'.*restd_url"):
        make_backend(SlurmConfig(backend="slurmrestd"))
