"""Failures found by the jobs' heartbeats in seconds, on the real stack: each fault is injected into a
running 2-node training job, which must come back on healthy nodes from its newest checkpoint.

Faults: a node powered off (link down: probes time out), a rank that crashes, a rank that hangs
(SIGSTOP, like a stuck collective), two nodes lost at once; and what must NOT count as a failure:
a rank that is slow (CPU-starved) but alive. A node that comes back right after its death does not
get the job back.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
from google.protobuf.duration_pb2 import Duration

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.training import EVERY, check_resume, finished, log_of, runs_of, train_pids, train_spec
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

TOTAL = 400  # steps of 0.1 s
HANG = 4  # seconds: the jobs' hang timeout here


def started(daemon: Daemon, stack: Stack, name: str, *args: str) -> tuple[jobs_pb2.JobStatus, list[str]]:
    """A 2-node job with a short hang timeout that has committed a checkpoint and is beating."""
    client = daemon.client("alice")
    policy = jobs_pb2.RestartPolicy(hang_timeout=Duration(seconds=HANG))
    spec = train_spec(
        stack, name, "--steps", str(TOTAL), "--every", str(EVERY), "--step-seconds", "0.1", *args, policy=policy
    )
    job = client.submit(spec).job
    running = wait_for(
        lambda: (
            (j := client.get(job.job_id)).state == jobs_pb2.JOB_STATE_RUNNING and j.checkpoint_step >= EVERY - 1 and j
        ),
        timeout=120,
        what="first checkpoint",
    )
    return job, list(running.nodes)


def test_powered_off_node_is_found_by_heartbeats(daemon: Daemon, stack: Stack, killed_nodes: list[str]) -> None:
    name = f"poweroff-{uuid.uuid4().hex[:6]}"
    job, nodes = started(daemon, stack, name)
    victim = nodes[-1]
    killed_nodes.append(victim)
    # Half a checkpoint interval past the first commit: the work the failure loses (a whole interval
    # would put the death next to the following save, leaving nothing lost).
    time.sleep(EVERY * 0.1 / 2)
    stack.stack_sh("kill-node", victim, "--power-off")
    done = finished(daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    (restart,) = done.restarts
    assert restart.cause == jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE and list(restart.failed_nodes) == [victim]
    assert restart.detected_by == "heartbeat+probe"
    check_resume(stack, name, done, victim, EVERY, TOTAL)
    # Goodput of a job that lost a node once: the steps after its last commit were redone.
    g = daemon.client("alice").goodput(job.job_id)
    parts = {f.name: getattr(g.breakdown, f.name) for f in g.breakdown.DESCRIPTOR.fields}
    assert 0 < g.ettr < 1 and parts["lost"] > 0 and parts["detection"] > 0, g
    assert abs(sum(parts.values()) - g.wall_seconds) < 1e-6, g


def test_crashed_rank_is_restarted_from_the_checkpoint(daemon: Daemon, stack: Stack) -> None:
    name = f"crash-{uuid.uuid4().hex[:6]}"
    spec = train_spec(
        stack,
        name,
        "--steps",
        str(TOTAL),
        "--every",
        str(EVERY),
        "--step-seconds",
        "0.1",
        "--crash-rank",
        "1",
        "--crash-at",
        str(EVERY * 2 + 5),
    )
    job = daemon.client("alice").submit(spec).job
    done = finished(daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    (restart,) = done.restarts
    assert restart.cause == jobs_pb2.TERMINATION_CAUSE_RANK_FAILED and restart.detected_by == "rank-exit"
    assert not restart.failed_nodes and not done.excluded_nodes  # the node was fine
    runs = runs_of(log_of(stack, name, job.job_id))
    assert len(runs) == 2 and runs[1].resumed_from == EVERY * 2 - 1, [r.header for r in runs]
    assert runs[-1].steps[0][-1] == TOTAL - 1


def test_hung_rank_is_restarted_and_its_node_kept(daemon: Daemon, stack: Stack) -> None:
    name = f"hang-{uuid.uuid4().hex[:6]}"
    job, nodes = started(daemon, stack, name)
    (pid,) = train_pids(nodes[-1])
    os.kill(pid, signal.SIGSTOP)  # a rank stuck for good (a collective that never returns)
    done = finished(daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    (restart,) = done.restarts
    assert restart.cause == jobs_pb2.TERMINATION_CAUSE_RANK_HUNG and restart.detected_by == "heartbeat"
    silent_for = restart.detected_at.ToNanoseconds() - restart.failed_at.ToNanoseconds()
    assert silent_for >= HANG * 1e9, restart  # not before the hang timeout
    assert not done.excluded_nodes
    runs = runs_of(log_of(stack, name, job.job_id))
    assert runs[-1].steps[0][-1] == TOTAL - 1


def test_slow_but_alive_rank_is_not_a_failure(daemon: Daemon, stack: Stack) -> None:
    """Starved of CPU (stopped 80% of the time, for far longer than a heartbeat interval and in all
    longer than the hang timeout): late beats still arrive, so nothing is declared dead."""
    name = f"slow-{uuid.uuid4().hex[:6]}"
    job, nodes = started(daemon, stack, name)
    (pid,) = train_pids(nodes[-1])
    stop = threading.Event()

    def starve() -> None:
        deadline = time.monotonic() + HANG * 3
        while time.monotonic() < deadline and not stop.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(1.6)  # > one interval (1 s), < the hang timeout
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.4)

    starver = threading.Thread(target=starve)
    starver.start()
    try:
        starver.join()
    finally:
        stop.set()
        os.kill(pid, signal.SIGCONT)
    done = finished(daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED and not done.restarts, done


def test_two_nodes_lost_at_once_make_one_restart(daemon: Daemon, stack: Stack, killed_nodes: list[str]) -> None:
    name = f"twodead-{uuid.uuid4().hex[:6]}"
    job, nodes = started(daemon, stack, name)
    killed_nodes.extend(nodes)
    # At once: one stack.sh each, started together (one after the other, bash's start-up under CI
    # load spread the two deaths over more than the detector's suspect window).
    kills = [threading.Thread(target=stack.stack_sh, args=("kill-node", node)) for node in nodes]
    for kill in kills:
        kill.start()
    for kill in kills:
        kill.join()
    done = finished(daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    (restart,) = done.restarts
    assert sorted(restart.failed_nodes) == sorted(nodes) and restart.detected_by == "heartbeat+probe"
    assert not set(nodes) & set(runs_of(log_of(stack, name, job.job_id))[-1].nodes.values())


def test_a_node_back_at_once_does_not_get_the_job_again(daemon: Daemon, stack: Stack, killed_nodes: list[str]) -> None:
    """It flaps: dead, then its slurmd registers again seconds later (ReturnToService) - the job's
    next run still avoids it."""
    name = f"flap-{uuid.uuid4().hex[:6]}"
    client = daemon.client("alice")
    job, nodes = started(daemon, stack, name)
    victim = nodes[-1]
    killed_nodes.append(victim)
    stack.stack_sh("kill-node", victim)
    wait_for(lambda: client.get(job.job_id).restarts, timeout=60, what="the restart decision")
    stack.stack_sh("revive-node", victim)
    done = finished(daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED and len(done.restarts) == 1, done
    assert victim not in runs_of(log_of(stack, name, job.job_id))[-1].nodes.values()


def test_a_job_back_on_its_revived_node_outlives_slurms_stale_kill(
    daemon: Daemon, stack: Stack, killed_nodes: list[str]
) -> None:
    """A job pinned to its node (exclusions off) waits for it; when the node returns, Slurm's kill for
    the lost run may reach the new run there: that is the node failure's tail, and the job finishes."""
    name = f"pinned-{uuid.uuid4().hex[:6]}"
    client = daemon.client("alice")
    victim = stack.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N").stdout.split()[0]
    policy = jobs_pb2.RestartPolicy(exclude_failed_nodes=False, hang_timeout=Duration(seconds=HANG))
    spec = train_spec(
        stack, name, "--steps", str(TOTAL), "--every", str(EVERY), "--step-seconds", "0.1", nodes=1, policy=policy
    )
    spec.placement.nodelist.append(victim)
    job = client.submit(spec).job
    wait_for(lambda: client.get(job.job_id).checkpoint_step >= EVERY - 1, timeout=120, what="first checkpoint")
    killed_nodes.append(victim)
    stack.stack_sh("kill-node", victim)
    wait_for(lambda: client.get(job.job_id).restarts, timeout=60, what="the restart decision")
    time.sleep(8)  # dead for seconds after the decision: Slurm's kill for the lost run waits for it
    stack.stack_sh("revive-node", victim)
    done = finished(daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    assert {r.cause for r in done.restarts} == {jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE}, done.restarts
