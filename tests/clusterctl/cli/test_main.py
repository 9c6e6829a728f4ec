"""``main``: option plumbing, error -> exit code mapping, one-line errors, the checkpoints hook."""

from __future__ import annotations

import argparse
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from clusterctl.cli.main import main
from clusterctl.cli.options import default_client_factory
from clusterctl.client import ClusterClient
from clusterctl.errors import ServiceError
from tests.support.heartbeat import serve

from .conftest import Runner
from .fakes import FakeClient


def one_line_error(err: str) -> bool:
    return err.startswith("clusterctl: error: ") and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["status"], "the following arguments are required: JOB_ID"),
        (["cancel"], "the following arguments are required: JOB_ID"),
        (["plan", "-N", "0"], "must be a positive integer"),
        (["list", "--timeout", "-3"], "must be a positive number of seconds"),
        (["list", "--timeout", "inf"], "argument --timeout: must be a positive number of seconds"),
        (["list", "--limit", "4294967296"], "argument --limit: must be a positive integer up to 4294967295"),
        (["list", "--limit", "\u0661\u0662"], "argument --limit: not an integer"),
        (["plan", "-N", "4294967296"], "argument -N/--nodes: must be a positive integer up to"),
        (["plan", "--gpus-per-node", "4294967296"], "argument --gpus-per-node"),
        (["plan", "--cpus-per-node", "99999999999"], "argument --cpus-per-node"),
        (["status", "1", "--", "x"], "unrecognized arguments: x"),
        (["--addr", "submit", "list", "--", "x"], "'-- COMMAND' is only accepted by submit"),
    ],
)
def test_usage_errors_exit_2(cli: Runner, argv: list[str], message: str) -> None:
    r = cli(*argv)
    assert r.code == 2
    assert one_line_error(r.err), r.err
    assert message in r.err


def test_help_exits_0(cli: Runner) -> None:
    r = cli("--help")
    assert r.code == 0 and "submit" in r.out and "topology" in r.out
    r = cli("submit", "--help")
    assert r.code == 0 and "--gpus-per-node" in r.out and "--checkpoint-uri" in r.out


@pytest.mark.parametrize(
    ("code_name", "exit_code"),
    [
        ("INVALID_ARGUMENT", 2),
        ("OUT_OF_RANGE", 2),
        ("NOT_FOUND", 1),
        ("PERMISSION_DENIED", 1),
        ("UNAVAILABLE", 1),
        ("INTERNAL", 1),
        ("DEADLINE_EXCEEDED", 1),
        ("ALREADY_EXISTS", 2),  # a reused --request-id with a different request: the caller's to fix
    ],
)
def test_service_errors_map_to_exit_codes(cli: Runner, fake: FakeClient, code_name: str, exit_code: int) -> None:
    fake.fail = ServiceError(code_name, "spec.nodes: must be positive")
    r = cli("submit", "--", "true")
    assert r.code == exit_code
    assert one_line_error(r.err)
    assert "spec.nodes: must be positive" in r.err


def test_an_older_server_without_the_call_is_named_in_one_line(cli: Runner, fake: FakeClient) -> None:
    """A new CLI against an older clusterd (grpc UNIMPLEMENTED): exit 2, no traceback."""
    fake.fail = ServiceError("UNIMPLEMENTED", "Method not found!", request_id="ab12cd34")
    r = cli("list")
    assert r.code == 2 and one_line_error(r.err)
    assert "the server is older than this client" in r.err and "`clusterctl list`" in r.err
    assert "request id" not in r.err


def test_a_real_server_without_the_service_answers_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    socket = tmp_path / "old.sock"
    with serve(socket, None):  # a gRPC server that has none of the calls: UNIMPLEMENTED
        code = main(["list", "--addr", f"unix:{socket}", "--timeout", "5"])
    err = capsys.readouterr().err
    assert code == 2 and one_line_error(err) and "the server is older than this client" in err, err


def test_multi_line_server_message_is_printed_whole(cli: Runner, fake: FakeClient) -> None:
    """sbatch's stderr, relayed by the server, keeps the line that names the problem."""
    message = "Slurm refused the job: sbatch: error: unrecognized option '--bogus'\nTry \"sbatch --help\""
    fake.fail = ServiceError("INVALID_ARGUMENT", message)
    r = cli("submit", "--", "true")
    assert r.code == 2
    assert r.err == f"clusterctl: error: {message}\n"
    fake.fail = ServiceError("INTERNAL", message)
    r = cli("submit", "--", "true")
    assert r.code == 1 and "unrecognized option '--bogus'\nTry" in r.err


def test_reused_request_id_names_the_first_job(cli: Runner, fake: FakeClient) -> None:
    fake.fail = ServiceError("ALREADY_EXISTS", "request id r1 was used for job 41 with a different request")
    r = cli("submit", "--request-id", "r1", "--", "true")
    assert (r.code, r.err) == (2, "clusterctl: error: request id r1 was used for job 41 with a different request\n")


def test_server_side_failures_quote_the_request_id(cli: Runner, fake: FakeClient) -> None:
    """The id an operator greps clusterd's logs for; a user's own bad input needs no operator."""
    fake.fail = ServiceError("INTERNAL", "sbatch: error: Batch job submission failed", request_id="ab12cd34")
    r = cli("submit", "--", "true")
    assert r.code == 1 and r.err.rstrip().endswith("(request id ab12cd34)")
    fake.fail = ServiceError("INVALID_ARGUMENT", "spec.nodes: must be positive", request_id="ab12cd34")
    assert "request id" not in cli("submit", "--", "true").err


def test_unauthenticated_hints_at_the_token(cli: Runner, fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERCTL_TOKEN", raising=False)
    fake.fail = ServiceError("UNAUTHENTICATED", "missing bearer token")
    r = cli("list")
    assert r.code == 1 and one_line_error(r.err)
    assert "no token given: set CLUSTERCTL_TOKEN" in r.err
    monkeypatch.setenv("CLUSTERCTL_TOKEN", "wrong")
    assert "token was rejected: check CLUSTERCTL_TOKEN" in cli("list").err
    monkeypatch.delenv("CLUSTERCTL_TOKEN")
    monkeypatch.setenv("CLUSTERCTL_TOKEN_FILE", "/some/file")
    assert "token was rejected: check CLUSTERCTL_TOKEN or CLUSTERCTL_TOKEN_FILE" in cli("list").err


def test_unavailable_names_the_address(cli: Runner, fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERCTL_ADDR", "10.0.0.9:50051")
    fake.fail = ServiceError("UNAVAILABLE", "Connection refused")
    r = cli("topology")
    assert r.code == 1
    assert r.err == (
        "clusterctl: error: cannot reach clusterd at 10.0.0.9:50051: Connection refused"
        " (check CLUSTERCTL_ADDR or --addr)\n"
    )


def test_ctrl_c_exits_130(cli: Runner, fake: FakeClient) -> None:
    fake.fail = KeyboardInterrupt()
    assert cli("list").code == 130


def test_unexpected_exception_is_one_line(cli: Runner, fake: FakeClient) -> None:
    fake.fail = RuntimeError("boom")
    r = cli("status", "1")
    assert r.code == 1 and one_line_error(r.err) and "RuntimeError: boom" in r.err


def test_connection_options_before_or_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERCTL_ADDR", raising=False)
    seen: list[argparse.Namespace] = []

    def factory(args: argparse.Namespace) -> FakeClient:
        seen.append(args)
        return FakeClient()

    assert main(["--addr", "a:1", "list"], client_factory=factory) == 0
    assert main(["list", "--addr", "b:2", "--timeout", "5"], client_factory=factory) == 0
    assert main(["--addr", "a:1", "list", "--addr", "c:3"], client_factory=factory) == 0
    assert main(["list"], client_factory=factory) == 0
    assert [(a.addr, a.timeout) for a in seen] == [("a:1", 30.0), ("b:2", 5.0), ("c:3", 30.0), (None, 30.0)]


def test_default_factory_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERCTL_ADDR", "envhost:1")
    monkeypatch.setenv("CLUSTERCTL_TOKEN", "envtoken")
    client = default_client_factory(argparse.Namespace(addr=None, timeout=7.0))
    assert isinstance(client, ClusterClient)
    assert (client.addr, client.token, client.timeout) == ("envhost:1", "envtoken", 7.0)
    client.close()
    client = default_client_factory(argparse.Namespace(addr="/run/x.sock", timeout=1.0))
    assert (client.addr, client.token) == ("unix:/run/x.sock", "envtoken")  # a bare path is a unix socket
    client.close()


def test_real_client_without_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["list", "--addr", "127.0.0.1:1", "--timeout", "3"])
    err = capsys.readouterr().err
    assert code == 1 and one_line_error(err)
    assert "127.0.0.1:1" in err


def test_console_script_exit_code_and_no_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "clusterctl.cli", "submit", "--nodes", "0", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr == "clusterctl: error: argument -N/--nodes: '0' is not a positive whole number\n"


def test_checkpoints_command_is_wired_in_when_present(cli: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []

    def register(subparsers: Any) -> None:
        p = subparsers.add_parser("checkpoints")
        p.add_argument("uri")
        p.set_defaults(func=lambda args: calls.append(args.uri) or 0)

    module = types.ModuleType("clusterctl.cli.checkpoints")
    module.register = register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "clusterctl.cli.checkpoints", module)
    r = cli("checkpoints", "s3://b/p")
    assert r.code == 0 and calls == ["s3://b/p"]


def test_cli_works_without_the_checkpoints_module(cli: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "clusterctl.cli.checkpoints", None)  # import raises ModuleNotFoundError
    assert cli("list").code == 0
    r = cli("checkpoints")
    assert r.code == 2 and "invalid choice: 'checkpoints'" in r.err
