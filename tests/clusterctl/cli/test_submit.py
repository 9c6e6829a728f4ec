"""``submit``: flags -> JobSpec mapping (golden), script handling, --wait exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from clusterctl.errors import ServiceError
from clusterctl.v1 import jobs_pb2

from .conftest import Runner
from .fakes import FakeClient, event, job, sent_spec

SCRIPT = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:4\nsrun python train.py\n"


@pytest.fixture(autouse=True)
def caller(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A known shell for every test: cwd is tmp_path, the environment is HOME plus COLUMNS."""
    for name in list(os.environ):
        if name not in ("COLUMNS", "TZ"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", "/home/alice")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def sent(fake: FakeClient) -> dict[str, Any]:
    return json_format.MessageToDict(sent_spec(fake), preserving_proto_field_name=True)


def test_all_flags_map_onto_the_job_spec(
    cli: Runner, fake: FakeClient, monkeypatch: pytest.MonkeyPatch, caller: Path
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "secret")
    r = cli(
        "submit",
        "-J",
        "llm",
        "-N",
        "4",
        "--ntasks-per-node",
        "4",
        "--gpus-per-node",
        "4",
        "-c",
        "8",
        "--mem",
        "64G",
        "-t",
        "02:00:00",
        "-p",
        "gpu",
        "-A",
        "ml",
        "-q",
        "high",
        "--env",
        "LR=0.1",
        "--env",
        "EMPTY=",
        "--export-env",
        "WANDB_API_KEY",
        "-D",
        "/home/alice/run",
        "-o",
        "/home/alice/%j.out",
        "-e",
        "/home/alice/%j.err",
        "--checkpoint-uri",
        "s3://ckpt/llm",
        "--checkpoint-tier",
        "memory",
        "--max-restarts",
        "5",
        "--no-requeue-on-node-failure",
        "--requeue-on-preemption",
        "--exclude-failed-nodes",
        "--retry-exit-code",
        "3",
        "--retry-exit-code",
        "4",
        "--fatal-exit-code",
        "2",
        "--no-progress-limit",
        "2",
        "--signal-before",
        "5m",
        "--backoff",
        "30",
        "--placement",
        "pack",
        "--max-wait",
        "10m",
        "--exclude",
        "node[1-2],node7",
        "-C",
        "a100|h100",
        "--request-id",
        "req-1",
        "--",
        "python",
        "train.py",
        "--lr",
        "0.1",
        "-N",
        "99",
    )
    assert r.code == 0, r.err
    assert sent(fake) == {
        "name": "llm",
        "command": ["python", "train.py", "--lr", "0.1", "-N", "99"],
        "nodes": 4,
        "tasks_per_node": 4,
        "gpus_per_node": 4,
        "cpus_per_task": 8,
        "memory_mb_per_node": "65536",
        "time_limit": "02:00:00",
        "partition": "gpu",
        "account": "ml",
        "qos": "high",
        "environment": {"HOME": "/home/alice", "LR": "0.1", "EMPTY": "", "WANDB_API_KEY": "secret"},
        "submit_directory": str(caller),
        "working_directory": "/home/alice/run",
        "stdout_path": "/home/alice/%j.out",
        "stderr_path": "/home/alice/%j.err",
        "checkpoint_uri": "s3://ckpt/llm",
        "checkpoint_tier": "memory",
        "restart_policy": {
            "max_restarts": 5,
            "on_node_failure": False,
            "on_preemption": True,
            "exclude_failed_nodes": True,
            "retryable_exit_codes": [3, 4],
            "fatal_exit_codes": [2],
            "backoff": "30s",
            "no_progress_limit": 2,
            "signal_before_timeout_seconds": 300,
        },
        "placement": {
            "policy": "PLACEMENT_POLICY_PACK",
            "max_wait_seconds": 600,
            "exclude_nodes": ["node1", "node2", "node7"],
        },
        "constraint": "a100|h100",
        "request_id": "req-1",
    }
    assert r.out == "Submitted batch job 100\n"  # sbatch's answer; -v adds state and placement on stderr


def test_script_is_sent_unchanged_and_unset_flags_stay_unset(cli: Runner, fake: FakeClient, tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_bytes(SCRIPT.encode())
    r = cli("submit", "job.sbatch")
    assert r.code == 0, r.err
    spec = sent(fake)
    assert spec["script"] == SCRIPT
    request_id = spec.pop("request_id")
    assert len(request_id) == 32  # a fresh uuid, so the client's retry is idempotent
    # Nothing overrides the #SBATCH lines; what sbatch would know of the caller travels.
    assert spec == {
        "script": SCRIPT,
        "script_name": "job.sbatch",
        "submit_directory": str(tmp_path),
        "environment": {"HOME": "/home/alice"},
    }


def test_gres_switches_and_nodelist(cli: Runner, fake: FakeClient) -> None:
    r = cli("submit", "--gres=gpu:a100:2", "--switches", "2", "--nodelist", "gpu[01-02]", "--", "hostname")
    assert r.code == 0, r.err
    spec = sent(fake)
    assert spec["gpus_per_node"] == 2
    assert spec["gpu_type"] == "a100"
    assert spec["placement"] == {
        "policy": "PLACEMENT_POLICY_EXACT",
        "switch_count": 2,
        "nodelist": ["gpu01", "gpu02"],
    }


def test_fresh_request_id_each_run(cli: Runner, fake: FakeClient) -> None:
    cli("submit", "--", "true")
    cli("submit", "--", "true")
    ids = {arg.request_id for name, arg in fake.calls if name == "submit"}
    assert len(ids) == 2


def test_script_from_stdin(cli: Runner, fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(SCRIPT.encode())))
    r = cli("submit", "-")
    assert r.code == 0, r.err
    assert sent(fake)["script"] == SCRIPT
    assert sent(fake)["script_name"] == "sbatch"  # sbatch's name for a script read from stdin


def test_script_from_stdin_without_a_dash(cli: Runner, fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """``clusterctl submit < job.sh``, as ``sbatch < job.sh``."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(SCRIPT.encode())))
    r = cli("submit", "-p", "debug")
    assert r.code == 0, r.err
    assert sent(fake)["script"] == SCRIPT and sent(fake)["script_name"] == "sbatch"
    assert r.out == "Submitted batch job 100\n"


@pytest.mark.parametrize(("tty", "data"), [(True, b""), (False, b"")])
def test_nothing_to_run(cli: Runner, fake: FakeClient, monkeypatch: pytest.MonkeyPatch, tty: bool, data: bytes) -> None:
    """No SCRIPT at a terminal, or an empty stdin (sbatch: "Batch script is empty")."""
    import io
    import sys

    stdin = io.TextIOWrapper(io.BytesIO(data))
    monkeypatch.setattr(stdin, "isatty", lambda: tty)
    monkeypatch.setattr(sys, "stdin", stdin)
    r = cli("submit")
    assert r.code == 2 and "nothing to run" in r.err, r.err
    assert not fake.calls


def test_verbose_adds_state_and_placement_on_stderr(cli: Runner, fake: FakeClient) -> None:
    r = cli("submit", "-v", "--", "true")
    assert r.code == 0, r.err
    assert r.out == "Submitted batch job 100\n"
    assert "State: PENDING" in r.err and "packed on leaf1" in r.err


def test_a_job_slurm_refuses_is_bad_input(cli: Runner, fake: FakeClient) -> None:
    fake.fail = ServiceError("FAILED_PRECONDITION", "Slurm refused the job: Invalid account or account/partition")
    r = cli("submit", "-A", "nope", "--", "true")
    assert r.code == 2 and "Slurm refused the job: Invalid account" in r.err, r.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["submit", "/nonexistent/x.sh"], "cannot read script '/nonexistent/x.sh': No such file"),
        (["submit", "-N", "0", "--", "true"], "argument -N/--nodes: '0' is not a positive whole number"),
        (["submit", "-N", "-1", "--", "true"], "argument -N/--nodes"),
        (["submit", "--mem", "5X", "--", "true"], "bad memory size '5X'"),
        (["submit", "--env", "NOVALUE", "--", "true"], "bad --env 'NOVALUE'"),
        (["submit", "--env", "1BAD=x", "--", "true"], "bad environment variable name '1BAD'"),
        (["submit", "-t", "soon", "--", "true"], "bad time limit 'soon'"),
        (["submit", "--exclude", "node[1-", "--", "true"], "unbalanced '['"),
        (["submit", "--placement", "spread", "--", "true"], "invalid choice: 'spread'"),
        (["submit", "--gres", "gpu:2", "--gpus-per-node", "4", "--", "true"], "--gres and --gpus-per-node disagree"),
        (["submit", "--export-env", "CLUSTERCTL_SURELY_UNSET", "--", "true"], "not set in this environment"),
        (["submit", "--retry-exit-code", "300", "--", "true"], "exit codes are 0..255"),
        (["submit", "--bogus", "--", "true"], "unrecognized arguments: --bogus"),
        (["submit", "--gres", "gpu:a100:2", "-G", "h100:4", "--", "true"], "different types: a100, h100"),
        (["submit", "--mem", "4G", "--mem-per-cpu", "1G", "--", "true"], "--mem and --mem-per-cpu"),
        (["submit", "-N", "4-2", "--", "true"], "the maximum is below the minimum"),
        (["submit", "--array", "1-", "--", "true"], "bad --array '1-'"),
        (["submit", "--nice", "-5", "--", "true"], "argument --nice: must be a non-negative integer"),
        (["submit", "--export", "A,,B", "--", "true"], "empty item"),
        (["submit", "--export", "1A", "--", "true"], "'1A' is not a variable name"),
        (["submit", "--gres", "shard:2", "--", "true"], "use --gres=gpu[:TYPE][:COUNT]"),
        (["submit", "--exclusive=other", "--", "true"], "--exclusive: ignored explicit argument 'other'"),
        (["submit", "--comment", "a\tb", "--", "true"], "one line of at most 1000 printable characters"),
        (["submit", "--export-file", "/etc/shadow", "--", "true"], "--export-file is not allowed: it makes"),
        (["submit", "--wrap", "hostname", "--", "true"], "not --wrap and '-- COMMAND'"),
        (["submit", "--json", "--parsable", "--", "true"], "--json and --parsable"),
        # past the proto field's range: a usage error naming the flag, not "internal error"
        (["submit", "-n", "99999999999", "--", "true"], "argument -n/--ntasks: must be a positive integer up to"),
        (["submit", "-N", "5000000000", "--", "true"], "argument -N/--nodes: must be a positive integer up to"),
        (["submit", "-N", "1-5000000000", "--", "true"], "argument -N/--nodes"),
        (["submit", "--nice", "99999999999", "--", "true"], "argument --nice: must be a non-negative integer up"),
        (["submit", "--mem", "99999999999999999999T", "--", "true"], "argument --mem: memory size"),
        (["submit", "--mem-per-cpu", "99999999999999999999T", "--", "true"], "argument --mem-per-cpu"),
        (["submit", "--backoff", "99999999999d", "--", "true"], "argument --backoff: duration"),
        (["submit", "--signal-before", "4294967296", "--", "true"], "argument --signal-before"),
        (["submit", "--max-wait", "4294967296", "--", "true"], "argument --max-wait"),
        (["submit", "--switches", "4294967296", "--", "true"], "argument --switches"),
        (["submit", "--max-restarts", "4294967296", "--", "true"], "argument --max-restarts"),
        (["submit", "--no-progress-limit", "4294967296", "--", "true"], "argument --no-progress-limit"),
        (["submit", "-c", "4294967296", "--", "true"], "argument -c/--cpus-per-task"),
        (["submit", "--ntasks-per-node", "4294967296", "--", "true"], "argument --ntasks-per-node"),
        (["submit", "-G", "4294967296", "--", "true"], "argument -G/--gpus"),
        (["submit", "--gpus-per-node", "a100:4294967296", "--", "true"], "argument --gpus-per-node"),
        (["submit", "--gres", "gpu:4294967296", "--", "true"], "argument --gres"),
        (["submit", "-t", "99999999999999", "--", "true"], "argument -t/--time: time limit"),
        (["submit", "--retry-exit-code", "99999999999", "--", "true"], "exit codes are 0..255"),
        (["submit", "-n", "\u0661\u0662", "--", "true"], "argument -n/--ntasks: not an integer"),
        (["submit", "-n", "1_000", "--", "true"], "argument -n/--ntasks: not an integer"),
    ],
)
def test_bad_input_exits_2_with_one_line(cli: Runner, fake: FakeClient, argv: list[str], message: str) -> None:
    r = cli(*argv)
    assert r.code == 2
    assert r.out == ""
    assert r.err.startswith("clusterctl: error: ")
    assert message in r.err
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    assert not [c for c in fake.calls if c[0] == "submit"]  # nothing was sent


def test_script_and_command_together(cli: Runner, tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text(SCRIPT)
    r = cli("submit", str(script), "--", "true")
    assert r.code == 2 and "not SCRIPT and '-- COMMAND'" in r.err


def test_oversized_script(cli: Runner, tmp_path: Path) -> None:
    script = tmp_path / "big.sh"
    script.write_bytes(b"#" * ((1 << 20) + 1))
    r = cli("submit", str(script))
    assert r.code == 2
    assert "larger than 1048576 bytes" in r.err


def test_binary_script(cli: Runner, tmp_path: Path) -> None:
    script = tmp_path / "bin.sh"
    script.write_bytes(b"\xff\xfe\x00")
    r = cli("submit", str(script))
    assert r.code == 2 and "not UTF-8" in r.err


def test_json_output(cli: Runner) -> None:
    r = cli("submit", "--json", "--", "true")
    assert r.code == 0
    data = json.loads(r.out)
    assert data["job"]["job_id"] == "100"
    assert data["job"]["state"] == "JOB_STATE_PENDING"
    assert data["duplicate"] is False


@pytest.mark.parametrize(("final", "code"), [(jobs_pb2.JOB_STATE_COMPLETED, 0), (jobs_pb2.JOB_STATE_FAILED, 1)])
def test_wait_follows_until_terminal(cli: Runner, fake: FakeClient, final: int, code: int) -> None:
    """Each state change is printed once; FAILED with no exit code reported still exits non-zero."""
    fake.events = [
        [
            event(job("100", jobs_pb2.JOB_STATE_PENDING, reason="Priority"), jobs_pb2.JOB_EVENT_TYPE_SNAPSHOT),
            event(job("100", jobs_pb2.JOB_STATE_RUNNING, nodes=["node1"])),
            event(job("100", jobs_pb2.JOB_STATE_RUNNING, nodes=["node1"])),  # no change: not printed
            event(job("100", final), jobs_pb2.JOB_EVENT_TYPE_FINISHED),
            event(job("100", jobs_pb2.JOB_STATE_RUNNING)),  # never read: the job was terminal
        ]
    ]
    r = cli("submit", "--wait", "--", "true")
    assert r.code == code, r.err
    lines = r.out.splitlines()
    assert lines[0] == "Submitted batch job 100"
    assert [line.split()[4] for line in lines[1:]] == ["PENDING", "RUNNING", jobs_pb2.JobState.Name(final)[10:]]


def test_wait_reconnects_when_the_stream_ends(cli: Runner, fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("clusterctl.cli.jobs.time.sleep", lambda _s: None)
    fake.events = [
        [event(job("100", jobs_pb2.JOB_STATE_RUNNING))],
        [event(job("100", jobs_pb2.JOB_STATE_COMPLETED), jobs_pb2.JOB_EVENT_TYPE_SNAPSHOT)],
    ]
    r = cli("submit", "--wait", "--json", "--", "true")
    assert r.code == 0, r.err
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert rows[0]["job"]["job_id"] == "100"  # the submit response first, then one line per event
    assert [row["job"]["state"] for row in rows[1:]] == ["JOB_STATE_RUNNING", "JOB_STATE_COMPLETED"]


def test_wait_interrupted_exits_130(cli: Runner, fake: FakeClient) -> None:
    fake.events = [[event(job("100", jobs_pb2.JOB_STATE_RUNNING)), KeyboardInterrupt()]]  # type: ignore[list-item]
    r = cli("submit", "--wait", "--", "true")
    assert r.code == 130
    assert "job 100 keeps going" in r.err


S = jobs_pb2
EXIT_CASES = [
    ("completed", job("100", S.JOB_STATE_COMPLETED, has_exit_code=True), 0),
    ("completed, no code reported", job("100", S.JOB_STATE_COMPLETED), 0),
    ("exit 3", job("100", S.JOB_STATE_FAILED, has_exit_code=True, exit_code=3), 3),
    ("exit 255", job("100", S.JOB_STATE_FAILED, has_exit_code=True, exit_code=255), 255),
    ("killed by SIGKILL", job("100", S.JOB_STATE_FAILED, has_exit_code=True, exit_signal=9), 137),
    ("cancelled, SIGTERM", job("100", S.JOB_STATE_CANCELLED, has_exit_code=True, exit_signal=15), 143),
    ("timeout, exit 0", job("100", S.JOB_STATE_TIMEOUT, terminal=True, has_exit_code=True, exit_code=0), 1),
    ("node fail, no code", job("100", S.JOB_STATE_NODE_FAIL, terminal=True), 1),
    ("oom", job("100", S.JOB_STATE_OUT_OF_MEMORY, terminal=True, has_exit_code=True), 1),
    ("failed, stale code ignored", job("100", S.JOB_STATE_FAILED, exit_code=7), 1),
]


@pytest.mark.parametrize(("final", "code"), [c[1:] for c in EXIT_CASES], ids=[c[0] for c in EXIT_CASES])
def test_wait_exits_with_the_jobs_exit_status(cli: Runner, fake: FakeClient, final: S.JobStatus, code: int) -> None:
    """Like a shell and sbatch --wait: the code, 128+signal, and never 0 for a job that did not complete."""
    fake.events = [[event(final, S.JOB_EVENT_TYPE_FINISHED)]]
    r = cli("submit", "--wait", "--", "true")
    assert r.code == code, r.err


def test_wait_parsable_prints_only_the_id(cli: Runner, fake: FakeClient) -> None:
    fake.events = [[event(job("100", S.JOB_STATE_FAILED, has_exit_code=True, exit_code=4))]]
    r = cli("submit", "-W", "--parsable", "--", "false")
    assert (r.code, r.out) == (4, "100\n")
