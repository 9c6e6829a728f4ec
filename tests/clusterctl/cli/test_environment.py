"""``--export``: the caller's environment travels as sbatch's ALL default would have it, bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clusterctl.cli import environment
from clusterctl.cli.environment import collect, parse_export

from .conftest import Runner
from .fakes import FakeClient, sent_spec

SHELL = {
    "HOME": "/home/alice",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t",
    "SLURM_JOB_ID": "7",
    "SBATCH_PARTITION": "x",
    "SALLOC_X": "1",
    "SRUN_Y": "1",
    "CLUSTERCTL_TOKEN": "tok",
    "BASH_FUNC_module%%": "() { :; }",
    "BASH_FUNC_x%%": "echo not a definition",
    "BASH_FUNC_a-b%%": "() { :; }",
    "not-an-identifier": "1",
    "BROKEN": "bad\udcffbytes",
}


def test_all_sends_the_shell_minus_what_never_travels() -> None:
    out = collect(None, SHELL)
    assert out.export is None  # the default stays unset so a script's #SBATCH --export decides
    # an exported function travels, as under sbatch's --export=ALL (Lmod's `module` is one)
    assert out.environment == {
        "HOME": "/home/alice",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "BASH_FUNC_module%%": "() { :; }",
    }
    assert out.left_out == []
    assert collect("ALL", SHELL).environment == out.environment
    assert collect("ALL", SHELL).export == "ALL"


def test_none_sends_nothing() -> None:
    out = collect("NONE", SHELL)
    assert (out.export, out.environment) == ("NONE", {})


def test_names_take_values_from_the_shell() -> None:
    out = collect("HOME,UNSET_HERE,LR=0.1,CLUSTERCTL_TOKEN", SHELL)
    assert out.export == "HOME,UNSET_HERE,LR=0.1,CLUSTERCTL_TOKEN"  # NAME=value items travel in export
    assert out.environment == {"HOME": "/home/alice"}  # unset names are skipped, as sbatch does


def test_all_with_names_keeps_everything() -> None:
    out = collect("ALL,LR=0.1", SHELL)
    assert set(out.environment) == {"HOME", "AWS_SECRET_ACCESS_KEY", "BASH_FUNC_module%%"}


def test_parse_export() -> None:
    assert parse_export("ALL") == (True, [])
    assert parse_export("NONE") == (False, [])
    assert parse_export("ALL,A,B=1,C") == (True, ["A", "C"])
    for bad in ("", "A,,B", "1A", "A-B=1"):
        with pytest.raises(ValueError):
            parse_export(bad)


def test_bounds_leave_out_the_excess_and_report_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "MAX_TOTAL_BYTES", 100)
    monkeypatch.setattr(environment, "MAX_VALUE_BYTES", 40)
    shell = {"A": "x" * 30, "B": "y" * 30, "C": "z" * 30, "HUGE": "h" * 41, "Z_NAMED": "keep"}
    out = collect("ALL,Z_NAMED", shell)
    assert list(out.environment) == ["Z_NAMED", "A", "B"]  # named first, then by name
    assert out.left_out == ["C", "HUGE"]
    monkeypatch.setattr(environment, "MAX_VARS", 1)
    assert list(collect(None, shell).environment) == ["A"]


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name not in ("COLUMNS", "TZ"):
            monkeypatch.delenv(name)
    for name, value in SHELL.items():
        if "\udcff" not in value:
            monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)


def sent_env(fake: FakeClient) -> tuple[str | None, dict[str, str]]:
    spec = sent_spec(fake)
    return (spec.export if spec.HasField("export") else None), dict(spec.environment)


@pytest.mark.usefixtures("shell")
def test_cli_default_is_export_all(cli: Runner, fake: FakeClient) -> None:
    assert cli("submit", "--", "env").code == 0
    assert sent_env(fake) == (
        None,
        {"HOME": "/home/alice", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "BASH_FUNC_module%%": "() { :; }"},
    )


@pytest.mark.usefixtures("shell")
def test_cli_export_none_with_explicit_variables(cli: Runner, fake: FakeClient) -> None:
    assert cli("submit", "--export=NONE", "--export-env", "HOME", "--env", "LR=0.1", "--", "env").code == 0
    # The explicit ones are named in export, so they reach the job under NONE's meaning too.
    assert sent_env(fake) == ("HOME,LR", {"HOME": "/home/alice", "LR": "0.1"})


@pytest.mark.parametrize(
    ("export", "names", "result"),
    [
        (None, ["LR"], None),
        ("ALL", ["LR"], "ALL"),
        ("ALL,A=1", ["LR"], "ALL,A=1"),
        ("NONE", [], "NONE"),
        ("NONE", ["LR", "LR"], "LR"),
        ("A=1,B", ["B", "A", "C"], "A=1,B,C"),
    ],
)
def test_explicit_variables_join_a_name_list(export: str | None, names: list[str], result: str | None) -> None:
    assert environment.with_names(export, names) == result


@pytest.mark.usefixtures("shell")
def test_cli_warns_about_what_the_bounds_left_out(
    cli: Runner, fake: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(environment, "MAX_VARS", 1)
    r = cli("submit", "--", "env")
    assert r.code == 0
    assert r.err.startswith("clusterctl: warning: ") and "variable(s) of this shell not sent" in r.err
    assert "HOME" in r.err and "name the ones the job needs in --export or --env" in r.err
