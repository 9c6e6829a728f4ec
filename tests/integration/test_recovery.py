"""Automatic requeue and resume, end to end: real Slurm, real S3, the real training example.

The training job prints ``STEP <n> rank <r>`` per step and ``START``/``RESUMED from step <s>`` per
run, so each test can prove from the job's own log what a failure cost in steps.
"""

from __future__ import annotations

import itertools
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm


def train_spec(stack: Stack, name: str, *args: str, nodes: int = 2, time_limit: str = "",
               policy: jobs_pb2.RestartPolicy | None = None) -> jobs_pb2.JobSpec:  # fmt: skip
    env = {k: v for k, v in stack.env.items() if k.startswith("AWS_")}
    return jobs_pb2.JobSpec(
        name=name,
        command=["python3", f"{stack.env['CLUSTERCTL_EXAMPLES']}/train.py", *args],
        nodes=nodes,
        checkpoint_uri=f"s3://{stack.env['CLUSTERCTL_BUCKET']}/tests/{name}",
        environment=env,
        time_limit=time_limit,
        restart_policy=policy,
    )


@dataclass
class Run:
    header: str  # START ... / RESUMED ...
    resumed_from: int | None
    nodes: dict[int, str]  # rank -> node
    steps: dict[int, list[int]]  # rank -> steps printed


def runs_of(text: str) -> list[Run]:
    """Split the job's appended log into runs; a run starts with a START or RESUMED line per rank."""
    runs: list[Run] = []
    for line in text.splitlines():
        m = re.match(r"(START fresh|RESUMED from step (\d+)) rank (\d+)/\d+ node (\S+)", line)
        if m:
            rank = int(m.group(3))
            if not runs or rank in runs[-1].nodes:
                runs.append(Run(line, int(m.group(2)) if m.group(2) else None, {}, {}))
            runs[-1].nodes[rank] = m.group(4)
            runs[-1].steps.setdefault(rank, [])
            continue
        m = re.match(r"STEP (\d+) rank (\d+)", line)
        if m and runs:
            runs[-1].steps.setdefault(int(m.group(2)), []).append(int(m.group(1)))
    return runs


def log_of(stack: Stack, name: str, job_id: str) -> str:
    return (stack.dir / "jobs" / "alice" / f"{name}-{job_id}.out").read_text()


def finished(daemon: Daemon, job_id: str, timeout: float = 300) -> jobs_pb2.JobStatus:
    client = daemon.client("alice")
    return wait_for(lambda: (j := client.get(job_id)).terminal and j, timeout=timeout,  # type: ignore[no-any-return]
                    interval=1, what=f"job {job_id} to finish")  # fmt: skip


@pytest.fixture
def killed_nodes(stack: Stack) -> Iterator[list[str]]:
    nodes: list[str] = []
    yield nodes
    for node in nodes:
        stack.stack_sh("revive-node", node)


def check_resume(stack: Stack, name: str, job: jobs_pb2.JobStatus, victim: str, every: int, total: int) -> None:
    runs = runs_of(log_of(stack, name, job.job_id))
    assert len(runs) >= 2, [r.header for r in runs]
    first, second = runs[0], runs[1]
    dead_rank = next(r for r, n in first.nodes.items() if n == victim)
    last_dead = max(first.steps[dead_rank])
    resumed = second.resumed_from
    assert resumed is not None, second.header
    # Nothing lost beyond one checkpoint interval: the resume point is within `every` steps of
    # where the dead rank stopped.
    assert last_dead - every <= resumed <= last_dead, (last_dead, resumed)
    assert victim not in second.nodes.values()
    # The job printed the step it actually restored (CheckpointManager.last_restored_step).
    assert f"resume_step {resumed}" in second.header, second.header
    for rank in (0, 1):
        assert second.steps[rank][0] == resumed + 1
        assert runs[-1].steps[rank][-1] == total - 1
    assert job.restarts[0].checkpoint_step == resumed


EVERY, TOTAL = 20, 500  # checkpoint interval and length (steps of 0.1 s) of the node-death runs


def training_with_checkpoints(daemon: Daemon, stack: Stack, name: str) -> tuple[jobs_pb2.JobStatus, str]:
    """A 2-node training job that has committed two checkpoints; returns it and the node to kill."""
    client = daemon.client("alice")
    job = client.submit(train_spec(stack, name, "--steps", str(TOTAL), "--every", str(EVERY),
                                   "--step-seconds", "0.1")).job  # fmt: skip
    running = wait_for(lambda: (j := client.get(job.job_id)).state == jobs_pb2.JOB_STATE_RUNNING
                       and j.checkpoint_step >= EVERY * 2 - 1 and j, timeout=120, what="first checkpoints")  # fmt: skip
    return job, running.nodes[-1]


def test_node_death_requeues_on_healthy_nodes_and_resumes(daemon: Daemon, stack: Stack,
                                                          killed_nodes: list[str]) -> None:  # fmt: skip
    name = f"nodekill-{uuid.uuid4().hex[:6]}"
    client = daemon.client("alice")
    job, victim = training_with_checkpoints(daemon, stack, name)
    seen = daemon.metrics()  # the supervisor's view of this job's checkpoints, on /metrics
    assert seen[f'clusterd_checkpoint_commits_seen_total{{job_id="{job.job_id}"}}'] >= 1
    assert seen[f'clusterd_checkpoint_step{{job_id="{job.job_id}"}}'] >= EVERY * 2 - 1
    requeues = 'clusterd_requeues_total{cause="NODE_FAILURE"}'
    killed_nodes.append(victim)
    stack.stack_sh("kill-node", victim)
    t_kill = time.monotonic()
    again = wait_for(lambda: (j := client.get(job.job_id)).restart_count >= 1
                     and j.state == jobs_pb2.JOB_STATE_RUNNING and j, timeout=240, what="running again")  # fmt: skip
    print(f"running again {time.monotonic() - t_kill:.0f}s after the node died, on {list(again.nodes)}")
    assert victim not in again.nodes
    assert daemon.metrics()[requeues] == seen.get(requeues, 0) + 1
    done = finished(daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    restart = done.restarts[0]
    assert restart.cause == jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE and victim in restart.failed_nodes
    assert victim in done.excluded_nodes
    check_resume(stack, name, done, victim, EVERY, TOTAL)


def test_service_restarted_during_recovery_still_brings_the_job_home(daemon: Daemon, stack: Stack,
                                                                     killed_nodes: list[str]) -> None:  # fmt: skip
    name = f"svckill-{uuid.uuid4().hex[:6]}"
    job, victim = training_with_checkpoints(daemon, stack, name)
    killed_nodes.append(victim)
    daemon.stop(sig=9)  # the service dies too
    stack.stack_sh("kill-node", victim)
    time.sleep(20)
    daemon.start()
    done = finished(daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    assert len(done.restarts) == 1 and done.restarts[0].cause == jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE
    check_resume(stack, name, done, victim, EVERY, TOTAL)


def test_time_limit_checkpoints_on_usr1_and_requeues(daemon: Daemon, stack: Stack) -> None:
    name, total = f"timelimit-{uuid.uuid4().hex[:6]}", 900
    policy = jobs_pb2.RestartPolicy(signal_before_timeout_seconds=45, max_restarts=10)
    spec = train_spec(stack, name, "--steps", str(total), "--every", "100", "--step-seconds", "0.1",
                      nodes=1, time_limit="2", policy=policy)  # fmt: skip
    job = daemon.client("alice").submit(spec).job
    done = finished(daemon, job.job_id, timeout=600)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    # The handler checkpointed and exited 85: each restart is the requeue it asked for, not a time limit.
    assert done.restarts and all(r.cause == jobs_pb2.TERMINATION_CAUSE_REQUEUE_REQUESTED for r in done.restarts)
    text = log_of(stack, name, job.job_id)
    assert "SIGNAL at step" in text
    runs = runs_of(text)
    for prev, nxt in itertools.pairwise(runs):
        # The signal handler checkpointed the exact step it stopped at: zero steps lost.
        assert nxt.resumed_from == prev.steps[0][-1], (prev.steps[0][-1], nxt.header)
    assert runs[-1].steps[0][-1] == total - 1


def test_crash_loop_stops_after_no_progress_limit(daemon: Daemon, stack: Stack) -> None:
    name = f"crashloop-{uuid.uuid4().hex[:6]}"
    policy = jobs_pb2.RestartPolicy(retryable_exit_codes=[1], no_progress_limit=2, max_restarts=10)
    job = daemon.client("alice").submit(train_spec(stack, name, "--fail-at", "0", nodes=1, policy=policy)).job
    done = finished(daemon, job.job_id, timeout=180)
    assert done.state == jobs_pb2.JOB_STATE_FAILED and done.exit_code == 1
    assert len(done.restarts) == 2
    assert "2 restarts made no checkpoint progress" in done.final_reason
    assert log_of(stack, name, job.job_id).count("FAIL at step 0") == 3


def test_fatal_exit_code_is_not_requeued(daemon: Daemon, stack: Stack) -> None:
    name = f"fatal-{uuid.uuid4().hex[:6]}"
    job = daemon.client("alice").submit(train_spec(stack, name, "--fail-at", "3", "--exit-code", "86",
                                                   nodes=1)).job  # fmt: skip
    done = finished(daemon, job.job_id, timeout=120)
    assert done.exit_code == 86 and not done.restarts and "fatal" in done.final_reason


def test_user_cancel_is_never_requeued(daemon: Daemon, stack: Stack) -> None:
    name = f"cancel-{uuid.uuid4().hex[:6]}"
    client = daemon.client("alice")
    job = client.submit(train_spec(stack, name, "--steps", "100000", "--step-seconds", "0.1", nodes=1)).job
    wait_for(lambda: client.get(job.job_id).state == jobs_pb2.JOB_STATE_RUNNING, timeout=60, what="running")
    client.cancel(job.job_id)
    done = finished(daemon, job.job_id, timeout=60)
    time.sleep(5)
    again = client.get(job.job_id)
    assert again.state == jobs_pb2.JOB_STATE_CANCELLED and not again.restarts and again.restart_count == 0
    assert done.final_reason == "cancelled by the user"
