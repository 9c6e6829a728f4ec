"""Job arrays through clusterd on the real stack: per-task state, ID_TASK, ``--wait`` over all tasks.

``submit --array=0-3`` where task 2 exits 3: ``list`` shows the tasks, ``status ID_1`` is that
task, ``cancel ID_3`` cancels task 3 only, and ``--wait`` ends when every task has ended, with
the first failed task's exit code (3), as a shell sees ``sbatch --wait``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

_CWD = Path("/tmp")  # alice must be able to enter the submit directory (the caller's cwd)
_SCRIPT = 'sleep 20; if [ "$SLURM_ARRAY_TASK_ID" = 2 ]; then exit 3; fi; exit 0'


def clusterctl(daemon: Daemon, *argv: str, cwd: Path = _CWD) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clusterctl.cli.main", *argv],
        env=daemon.cli_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_array_tasks_are_first_class(daemon: Daemon) -> None:
    argv = [
        sys.executable,
        "-m",
        "clusterctl.cli.main",
        "submit",
        "--array=0-3",
        "-t",
        "2",
        "-D",
        "/tmp",
        "-o",
        "/dev/null",
        "--parsable",
        "--wait",
        "--wrap",
        _SCRIPT,
    ]
    waiter = subprocess.Popen(
        argv, env=daemon.cli_env(), cwd=_CWD, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert waiter.stdout is not None
        job_id = waiter.stdout.readline().strip()
        assert job_id.isdigit(), waiter.stderr.read() if waiter.stderr else ""
        client = daemon.client()

        def running(task: int) -> bool:
            return client.get(f"{job_id}_{task}").state == jobs_pb2.JOB_STATE_RUNNING

        wait_for(lambda: all(running(t) for t in range(4)), timeout=60, what="all four tasks running")
        listed = clusterctl(daemon, "list")
        assert listed.returncode == 0, listed.stderr
        for task in range(4):
            assert f"{job_id}_{task}" in listed.stdout, listed.stdout

        shown = clusterctl(daemon, "status", f"{job_id}_1")
        assert shown.returncode == 0, shown.stderr
        assert f"{job_id}_1" in shown.stdout and "RUNNING" in shown.stdout
        whole = clusterctl(daemon, "status", job_id)
        assert "Array tasks" in whole.stdout and f"{job_id}_3" in whole.stdout
        events = client.watch([f"{job_id}_1"], include_initial=True)  # a task id follows its array
        first = next(events)
        events.close()
        assert first.job.job_id == job_id and [t.task_id for t in first.job.tasks] == [0, 1, 2, 3]

        cancelled = clusterctl(daemon, "cancel", f"{job_id}_3")
        assert cancelled.returncode == 0, cancelled.stderr
        wait_for(
            lambda: client.get(f"{job_id}_3").state == jobs_pb2.JOB_STATE_CANCELLED, timeout=30, what="task 3 cancelled"
        )
        assert all(running(t) for t in range(3))  # the other tasks were left alone
        assert client.get(job_id).state == jobs_pb2.JOB_STATE_RUNNING

        bad = clusterctl(daemon, "status", f"{job_id}_x")
        assert bad.returncode == 2 and "job_id" in bad.stderr

        assert waiter.wait(timeout=120) == 3, waiter.stderr.read() if waiter.stderr else ""
        final = client.get(job_id)
        states = {t.task_id: t.state for t in final.tasks}
        assert states == {
            0: jobs_pb2.JOB_STATE_COMPLETED,
            1: jobs_pb2.JOB_STATE_COMPLETED,
            2: jobs_pb2.JOB_STATE_FAILED,
            3: jobs_pb2.JOB_STATE_CANCELLED,
        }
        assert final.terminal and final.state == jobs_pb2.JOB_STATE_FAILED and final.exit_code == 3
        assert {t.task_id: t.exit_code for t in final.tasks}[2] == 3
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()


def test_a_failed_task_is_requeued_alone_within_its_own_budget(daemon: Daemon) -> None:
    """Task 1 exits 7 (retryable, one restart): ``scontrol requeue ID_1`` runs it again, task 0 runs
    once; the second failure spends task 1's budget and ``--wait`` exits 7."""
    script = 'sleep 2; if [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then exit 7; fi; exit 0'
    done = clusterctl(
        daemon,
        "submit",
        "--array=0-1",
        "-t",
        "2",
        "-D",
        "/tmp",
        "-o",
        "/dev/null",
        "--parsable",
        "--retry-exit-code",
        "7",
        "--max-restarts",
        "1",
        "--wait",
        "--wrap",
        script,
    )
    assert done.returncode == 7, done.stderr
    job_id = done.stdout.split()[0]
    final = daemon.client().get(job_id)
    tasks = {t.task_id: t for t in final.tasks}
    assert tasks[0].state == jobs_pb2.JOB_STATE_COMPLETED and tasks[0].restart_count == 0
    assert tasks[1].state == jobs_pb2.JOB_STATE_FAILED and tasks[1].restart_count == 1 and tasks[1].exit_code == 7
    assert [r.detail.split(":")[0] for r in final.restarts] == ["task 1"]


def test_a_pending_task_cancelled_ends_and_the_array_ends_with_its_tasks(daemon: Daemon) -> None:
    """Slurm 22.05 takes ``scancel A_T`` of a pending task out of the pending range and lists no
    element for it: the task shows CANCELLED, the pending row keeps squeue's reason, and the array
    ends (``--wait`` returns) once the other tasks have."""
    client = daemon.client()
    spec = jobs_pb2.JobSpec(
        name="arr-cancel", command=["sleep", "2"], array="1-3%1", working_directory="/tmp", stdout_path="/dev/null"
    )
    job_id = client.submit(spec).job.job_id
    try:
        wait_for(
            lambda: client.get(f"{job_id}_1").state == jobs_pb2.JOB_STATE_RUNNING, timeout=60, what="task 1 running"
        )
        client.cancel(f"{job_id}_3")
        job = wait_for(
            lambda: (
                (j := client.get(job_id))
                and any(t.task_id == 3 and t.state == jobs_pb2.JOB_STATE_CANCELLED for t in j.tasks)
                and j
            ),
            timeout=30,
            what="task 3 cancelled",
        )
        if any(t.task_id == 2 and t.state == jobs_pb2.JOB_STATE_PENDING for t in job.tasks):
            assert job.reason == "JobArrayTaskLimit", job
        done = wait_for(lambda: (j := client.get(job_id)).terminal and j, timeout=90, what="the array's end")
        states = {t.task_id: t.state for t in done.tasks}
        assert states == {
            1: jobs_pb2.JOB_STATE_COMPLETED,
            2: jobs_pb2.JOB_STATE_COMPLETED,
            3: jobs_pb2.JOB_STATE_CANCELLED,
        }, done
        assert done.state == jobs_pb2.JOB_STATE_CANCELLED
    finally:
        client.cancel(job_id)
