"""The in-job runtime (clusterctl.job_runtime): heartbeats inside a block, the block's exit as the last beat.

The exit status is checked against what the child process really exits with; every child runs
against a fake JobService on a unix socket (tests.support.heartbeat).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

import clusterctl
from clusterctl.runtime import exit_status
from tests.support.heartbeat import FakeJobService, HeartbeatRequest, heartbeat_env, run_child


def exiting(beats: list[HeartbeatRequest]) -> list[int]:
    """The exit codes of the exiting beats, in order."""
    return [b.exit_code for b in beats if b.exiting]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (None, 0),
        (SystemExit(), 0),
        (SystemExit(None), 0),
        (SystemExit(3), 3),
        (SystemExit(259), 3),
        (SystemExit(-1), 255),
        (SystemExit(True), 1),
        (SystemExit("a message"), 1),
        (KeyboardInterrupt(), 130),
        (ValueError("boom"), 1),
        (GeneratorExit(), 1),
    ],
)
def test_exit_status_is_what_the_process_exits_with(error: BaseException | None, status: int) -> None:
    assert exit_status(error) == status


def test_nothing_is_patched() -> None:
    before = (sys.exit, sys.excepthook, atexit._ncallbacks())  # type: ignore[attr-defined]
    with clusterctl.job_runtime():
        assert (sys.exit, sys.excepthook, atexit._ncallbacks()) == before  # type: ignore[attr-defined]

    @clusterctl.job_runtime()
    def work() -> int:
        return 4

    assert work() == 4
    assert (sys.exit, sys.excepthook, atexit._ncallbacks()) == before  # type: ignore[attr-defined]


# A child waits for its sender's first answered beat before it ends: the exiting beat goes out only
# once the sender is connected (a process that ends sooner reports nothing; Slurm still knows).
CONNECTED = """
import time
from clusterctl import heartbeat

def connected():
    deadline = time.monotonic() + 30
    while heartbeat.start().sent < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
"""

BLOCK = (
    CONNECTED
    + """
import sys
import clusterctl
assert sys.exit.__module__ == "sys" and sys.excepthook is sys.__excepthook__
with clusterctl.job_runtime():
    assert sys.exit.__module__ == "sys" and sys.excepthook is sys.__excepthook__
    heartbeat.report_step(5)
    connected()
    {ending}
"""
)


@pytest.mark.parametrize(
    ("ending", "status"),
    [
        ("pass", 0),
        ("sys.exit(3)", 3),
        ("raise SystemExit(3)", 3),
        ("sys.exit(256 + 7)", 7),
        ("sys.exit(-1)", 255),
        ("sys.exit('a message')", 1),
        ("raise ValueError('boom')", 1),
        ("raise KeyboardInterrupt", 130),
        ("from clusterctl.slurm_env import RequeueOnSignal; RequeueOnSignal().exit()", 85),
    ],
)
def test_the_last_beat_carries_the_exit_status(sock: Path, fake: FakeJobService, ending: str, status: int) -> None:
    t0 = time.monotonic()
    done = run_child(BLOCK.format(ending=ending), heartbeat_env(sock))
    assert time.monotonic() - t0 < 10
    if status == 130:  # Python ends itself with SIGINT after an uncaught KeyboardInterrupt
        assert done.returncode == -signal.SIGINT, done.stderr
    else:
        assert done.returncode == status, done.stderr
    beats = fake.requests()
    assert exiting(beats) == [status] and beats[-1].exiting, beats
    assert beats[-1].step == 5 and beats[-1].pid != os.getpid()
    if status == 1 and "boom" in ending:  # the traceback is printed as always
        assert "ValueError: boom" in done.stderr


def test_as_a_decorator(sock: Path, fake: FakeJobService) -> None:
    code = CONNECTED + textwrap.dedent("""
    import clusterctl

    @clusterctl.job_runtime()
    def main():
        heartbeat.report_step(1)
        connected()

    main()  # returning: exit 0
    """)
    done = run_child(code, heartbeat_env(sock))
    assert done.returncode == 0, done.stderr
    assert exiting(fake.requests()) == [0]


def test_a_decorated_function_that_exits(sock: Path, fake: FakeJobService) -> None:
    code = CONNECTED + textwrap.dedent("""
    import sys
    import clusterctl

    @clusterctl.job_runtime()
    def main():
        heartbeat.report_step(1)
        connected()
        sys.exit(4)

    main()
    """)
    done = run_child(code, heartbeat_env(sock))
    assert done.returncode == 4, done.stderr
    assert exiting(fake.requests()) == [4]


MANAGER = (
    CONNECTED
    + """
import sys, time
import numpy as np
import clusterctl
from clusterctl.checkpoint import CheckpointManager
{body}
"""
)


def run_manager(sock: Path, tmp_path: Path, body: str) -> int:
    code = MANAGER.format(body=body.replace("URI", repr(str(tmp_path / "ckpt"))))
    done = run_child(code, heartbeat_env(sock, SLURM_PROCID="0", SLURM_NTASKS="1"))
    assert "Traceback" not in done.stderr or "ValueError: boom" in done.stderr, done.stderr
    return done.returncode


def test_a_manager_block_reports_an_exception_leaving_it(sock: Path, fake: FakeJobService, tmp_path: Path) -> None:
    body = """
with CheckpointManager(URI) as ckpt:
    ckpt.restore()
    connected()
    ckpt.save(3, {"w": np.arange(4)}).result()
    raise ValueError("boom")
"""
    assert run_manager(sock, tmp_path, body) == 1
    beats = fake.requests()
    assert exiting(beats) == [1] and beats[-1].committed_step == 3 and beats[-1].restored


def test_a_script_going_on_after_a_manager_block_has_not_exited(
    sock: Path, fake: FakeJobService, tmp_path: Path
) -> None:
    body = """
with CheckpointManager(URI) as ckpt:
    ckpt.restore()
    connected()
    ckpt.save(3, {"w": np.arange(4)}).result()
sent = heartbeat.start().sent
heartbeat.report_step(4)  # the sender still runs after the block
heartbeat.beat_now()
while heartbeat.start().sent < sent + 2:  # a beat in flight, then one with step 4
    time.sleep(0.01)
"""
    assert run_manager(sock, tmp_path, body) == 0
    beats = fake.requests()
    assert exiting(beats) == [] and beats[-1].step == 4 and beats[-1].committed_step == 3


def test_inside_the_runtime_the_outermost_block_reports(sock: Path, fake: FakeJobService, tmp_path: Path) -> None:
    body = """
with clusterctl.job_runtime():
    try:
        with CheckpointManager(URI) as ckpt:
            ckpt.restore()
            connected()
            raise ValueError("boom")
    except ValueError:
        pass  # caught: the rank goes on
    with CheckpointManager(URI) as ckpt:
        ckpt.save(8, {"w": np.arange(4)}).result()
    sys.exit(9)
"""
    assert run_manager(sock, tmp_path, body) == 9
    beats = fake.requests()
    assert exiting(beats) == [9] and beats[-1].committed_step == 8


def test_without_configuration_the_runtime_sends_nothing_and_imports_nothing_heavy(
    sock: Path, fake: FakeJobService
) -> None:
    code = """
    import sys
    import clusterctl
    with clusterctl.job_runtime():
        pass
    assert "grpc" not in sys.modules, "unconfigured heartbeats import nothing heavy"
    """
    for env in (heartbeat_env(sock, CLUSTERCTL_HEARTBEAT="0"), {}):
        done = run_child(code, env)
        assert done.returncode == 0, done.stderr
    assert fake.beats == []


def test_examples_train_reports_its_exit_code(sock: Path, fake: FakeJobService, tmp_path: Path) -> None:
    """examples/train.py, the job of the recovery tests: ``sys.exit(main())`` inside the runtime block."""
    train = Path(__file__).resolve().parents[2] / "examples" / "train.py"
    argv = ["--ckpt", str(tmp_path / "ckpt"), "--steps", "9", "--every", "2", "--fail-at", "5", "--exit-code", "42"]
    code = (  # grpc imported up front: the sender connects at once, before this short job ends
        f"import grpc, runpy, sys; sys.argv = {[str(train), *argv]!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    done = run_child(code, heartbeat_env(sock, SLURM_PROCID="0", SLURM_NTASKS="1"), timeout=60)
    assert done.returncode == 42, done.stderr
    beats = fake.requests()
    assert exiting(beats) == [42] and beats[-1].step == 4 and beats[-1].restored
