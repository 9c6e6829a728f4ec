"""Automatic requeue and resume, end to end: real Slurm, real S3, the real training example.

The training job (tests.support.training) prints each step and run, so each test can prove from
the job's own log what a failure cost in steps.
"""

from __future__ import annotations

import itertools
import time
import uuid

import pytest

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.training import (
    EVERY,
    TOTAL,
    check_resume,
    finished,
    log_of,
    runs_of,
    train_spec,
    training_with_checkpoints,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm


def test_node_death_requeues_on_healthy_nodes_and_resumes(
    daemon: Daemon, stack: Stack, killed_nodes: list[str]
) -> None:
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
    again = wait_for(
        lambda: (j := client.get(job.job_id)).restart_count >= 1 and j.state == jobs_pb2.JOB_STATE_RUNNING and j,
        timeout=240,
        what="running again",
    )
    print(f"running again {time.monotonic() - t_kill:.0f}s after the node died, on {list(again.nodes)}")
    assert victim not in again.nodes
    assert daemon.metrics()[requeues] == seen.get(requeues, 0) + 1
    done = finished(daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    restart = done.restarts[0]
    assert restart.cause == jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE and victim in restart.failed_nodes
    assert victim in done.excluded_nodes
    check_resume(stack, name, done, victim, EVERY, TOTAL)
    # Found by the ranks' heartbeats and a probe of the node, not by Slurm after SlurmdTimeout (30 s
    # here); every phase of the recovery is on the record, in order.
    assert restart.detected_by == "heartbeat+probe", restart
    phases = [restart.failed_at, restart.detected_at, restart.requeued_at, restart.running_at, restart.first_step_at]
    assert all(p.seconds for p in phases), restart
    assert [p.ToNanoseconds() for p in phases] == sorted(p.ToNanoseconds() for p in phases), restart
    assert restart.detected_at.ToSeconds() - restart.failed_at.ToSeconds() < 10, restart


def test_service_restarted_during_recovery_still_brings_the_job_home(
    daemon: Daemon, stack: Stack, killed_nodes: list[str]
) -> None:
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
    spec = train_spec(
        stack,
        name,
        "--steps",
        str(total),
        "--every",
        "100",
        "--step-seconds",
        "0.1",
        nodes=1,
        time_limit="2",
        policy=policy,
    )
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
    # Each restart shows the step its run committed last, the one the next run resumed from.
    assert [r.checkpoint_step for r in done.restarts] == [r.resumed_from for r in runs[1:]], done.restarts
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
    job = daemon.client("alice").submit(train_spec(stack, name, "--fail-at", "3", "--exit-code", "86", nodes=1)).job
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
