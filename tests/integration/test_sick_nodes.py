"""Hangs by progress, stragglers and node health across jobs, on the real stack.

A rank whose main thread blocks while its beat thread beats is found by its step alone and the job
restarted, with the stuck rank's stack in the restart record; a rank running twice slower is named
with its node; hangs of two users' jobs pinned on one node make it a suspect, never drain it (a
drain needs a node death clusterd confirmed itself: tests/clusterd/liveness/test_health.py); a hang
and a death on one node drain it, and the operator's health probe returns it once it passes.
"""

from __future__ import annotations

import re
import shutil
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from clusterctl.v1 import cluster_pb2, jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.training import runs_of, train_spec
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

FLOOR = 3  # seconds: the service's progress-hang floor here (the ranks' steps are 0.1 s)
PROBE_EVERY = 2  # seconds: the health probe's interval here
SICK = Path(f"/tmp/clusterctl-test-sick-{uuid.uuid4().hex[:8]}")  # the probe fails while this exists
# A rank is judged once clusterd saw its step advance 3 times: with 1 s beats, 6 s of steps.
BLOCK_AT = 60


@pytest.fixture(scope="module")
def daemon(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon.reachable_by_jobs(
        stack,
        tmp_path_factory.mktemp("clusterd-sick"),
        extra_env={
            "CLUSTERD_LIVENESS__PROGRESS_HANG_FLOOR_SECONDS": str(FLOOR),
            "CLUSTERD_LIVENESS__STRAGGLER_WINDOW_STEPS": "20",
            "CLUSTERD_LIVENESS__DRAIN_FAILING_NODES": "true",  # the stack's own config drains nothing
            "CLUSTERD_LIVENESS__HEALTH_EVENT_SECONDS": "1",  # the test's failures come seconds apart
            "CLUSTERD_LIVENESS__HEALTH_PROBE_COMMAND": f"/bin/sh -c 'test ! -e {SICK}'",
            "CLUSTERD_LIVENESS__HEALTH_PROBE_INTERVAL_SECONDS": str(PROBE_EVERY),
            "CLUSTERD_LIVENESS__HEALTH_PROBE_TIMEOUT_SECONDS": "30",
        },
    )
    d.start()
    yield d
    d.stop()
    assert d.socket_dir is not None
    shutil.rmtree(d.socket_dir, ignore_errors=True)


def log_text(stack: Stack, user: str, name: str, job_id: str) -> str:
    path = stack.dir / "jobs" / user / f"{name}-{job_id}.out"
    return path.read_text() if path.exists() else ""


def restarted(daemon: Daemon, user: str, job_id: str, timeout: float = 90) -> jobs_pb2.RestartRecord:
    """The job's first restart, once recorded; the job is cancelled then (it has shown what it had to)."""
    client = daemon.client(user)
    job = wait_for(lambda: (j := client.get(job_id)).restarts and j, timeout=timeout, interval=0.5, what="a restart")
    client.cancel(job_id)
    return job.restarts[0]  # type: ignore[no-any-return]


def blocked_spec(stack: Stack, name: str) -> jobs_pb2.JobSpec:
    """A 2-node training job whose rank 1 blocks its main thread at step BLOCK_AT while it beats."""
    return train_spec(
        stack,
        name,
        "--steps",
        "400",
        "--every",
        "10",
        "--step-seconds",
        "0.1",
        "--block-rank",
        "1",
        "--block-at",
        str(BLOCK_AT),
    )


def test_a_rank_blocked_while_it_beats_is_hung_by_progress(daemon: Daemon, stack: Stack) -> None:
    name = f"block-{uuid.uuid4().hex[:6]}"
    spec = blocked_spec(stack, name)
    job = daemon.client("alice").submit(spec).job
    restart = restarted(daemon, "alice", job.job_id)
    assert restart.cause == jobs_pb2.TERMINATION_CAUSE_RANK_HUNG and restart.detected_by == "progress", restart
    stuck = restart.detected_at.ToNanoseconds() - restart.failed_at.ToNanoseconds()
    assert FLOOR * 1e9 <= stuck <= 30e9, restart  # not before the floor; found within 30 s
    assert "rank 1 on " in restart.detail and f"at step {BLOCK_AT - 1}" in restart.detail, restart.detail
    assert "blocked_for_good" in restart.detail  # the stuck rank's own stack, in the job's record
    assert not restart.failed_nodes  # a hang excludes no node


def test_a_rank_twice_slower_is_named_with_its_node(daemon: Daemon, stack: Stack) -> None:
    name = f"slow-{uuid.uuid4().hex[:6]}"
    spec = train_spec(
        stack,
        name,
        "--steps",
        "300",
        "--every",
        "50",
        "--step-seconds",
        "0.1",
        "--slow-rank",
        "1",
        "--slow-factor",
        "2",
    )
    client = daemon.client("alice")
    job = client.submit(spec).job
    try:
        named = wait_for(
            lambda: (j := client.get(job.job_id)).stragglers and j, timeout=90, interval=0.3, what="a straggler"
        )
        (run,) = runs_of(log_text(stack, "alice", name, job.job_id))
        (straggler,) = named.stragglers
        assert straggler.node == run.nodes[1] and 1.6 <= straggler.ratio <= 2.5, named.stragglers
        assert len(run.steps[1]) <= 40, len(run.steps[1])  # named within 40 of its steps
    finally:
        client.cancel(job.job_id)


def health_of(daemon: Daemon, node: str) -> tuple[bool, str]:
    """Whether Slurm shows ``node`` drained (or draining), and its HEALTH as `clusterctl nodes` shows it."""
    (n,) = [n for n in daemon.client("root").nodes() if n.name == node]
    return "DRAIN" in n.flags or "DRAIN" in cluster_pb2.NodeState.Name(n.state), n.health


def hang_on(daemon: Daemon, stack: Stack, user: str, nodes: list[str]) -> str:
    """A 2-node job of ``user`` on ``nodes`` whose rank 1 blocks while it beats (rank 0 steps on);
    the node the hang was pinned on, once the job was restarted."""
    name = f"sick-{uuid.uuid4().hex[:6]}"
    spec = blocked_spec(stack, name)
    spec.sbatch_options.append(f"--nodelist={','.join(nodes)}")
    job = daemon.client(user).submit(spec).job
    restart = restarted(daemon, user, job.job_id)
    assert restart.detected_by == "progress", restart
    (node,) = re.findall(r"rank 1 on (\S+) at step", restart.detail)
    return node


def test_two_users_hangs_on_a_node_make_it_a_suspect_never_drain_it(daemon: Daemon, stack: Stack) -> None:
    """The attack: two colluding accounts block their ranks on one node. Their jobs are restarted;
    the node stays in service, shown as a suspect."""
    nodes = sorted(n.name for n in daemon.client("root").nodes())[-2:]
    with ThreadPoolExecutor(2) as pool:
        pinned = set(pool.map(lambda user: hang_on(daemon, stack, user, nodes), ("alice", "bob")))
    (node,) = pinned  # ranks follow the node order: rank 1 of both jobs ran on the same node
    time.sleep(1)
    drained, health = health_of(daemon, node)
    # (the module's first test may have pinned a hang there too)
    assert not drained and re.fullmatch(r"failed [23] jobs \([23] hang\); suspect", health), health


@pytest.fixture
def resumed_nodes(stack: Stack) -> Iterator[list[str]]:
    """Nodes a test may leave drained: resumed afterwards, whatever the test's outcome."""
    nodes: list[str] = []
    yield nodes
    for node in nodes:
        stack.run("scontrol", "delete", f"reservation=clusterd-probe-{node}", check=False)
        stack.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)


def test_a_node_that_failed_two_jobs_is_drained_and_returns_once_its_probe_passes(
    daemon: Daemon, stack: Stack, killed_nodes: list[str], resumed_nodes: list[str]
) -> None:
    """A hang pinned on a node, then its death under another user's job: drained. The operator's
    probe fails while the node is sick (it stays drained), then passes: back in service."""
    nodes = sorted(n.name for n in daemon.client("root").nodes())[:2]
    node = hang_on(daemon, stack, "alice", nodes)
    killed_nodes.append(node)
    resumed_nodes.append(node)
    SICK.touch()
    try:
        client = daemon.client("bob")
        spec = train_spec(
            stack, f"die-{uuid.uuid4().hex[:6]}", "--steps", "400", "--every", "10", "--step-seconds", "0.1"
        )
        spec.sbatch_options.append(f"--nodelist={','.join(nodes)}")
        job = client.submit(spec).job
        wait_for(lambda: client.get(job.job_id).checkpoint_step >= 9, timeout=60, interval=0.3, what="a checkpoint")
        stack.stack_sh("kill-node", node)
        restart = restarted(daemon, "bob", job.job_id, timeout=30)
        assert restart.cause == jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE and node in restart.failed_nodes, restart
        wait_for(lambda: health_of(daemon, node)[0], timeout=10, interval=0.3, what="the drain")
        stack.stack_sh("revive-node", node, "--keep-drain")  # the drain stays
        killed_nodes.remove(node)
        failed = wait_for(
            lambda: "health probe failed" in (h := health_of(daemon, node)[1]) and h,
            timeout=30,
            interval=0.3,
            what="a failing probe",
        )
        assert "drained by clusterd" in failed, failed
        # Slurm's own word (clusterd's view may be a poll from the probe's run): drained again.
        state = stack.run("sinfo", "-h", "-N", "-n", node, "-o", "%T").stdout.split()[0]
        assert "drain" in state, f"a failing probe left {node} {state}"
    finally:
        SICK.unlink(missing_ok=True)
    back = wait_for(
        lambda: not (h := health_of(daemon, node))[0] and "returned to service" in h[1] and h[1],
        timeout=30,
        interval=0.3,
        what="the node back in service",
    )
    assert back.startswith("returned to service at "), back
    resumed_nodes.remove(node)
