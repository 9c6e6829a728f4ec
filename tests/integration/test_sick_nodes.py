"""Hangs by progress, stragglers and node health across jobs, on the real stack.

A rank whose main thread blocks while its beat thread beats is found by its step alone and the job
restarted, with the stuck rank's stack in the restart record; a rank running twice slower is named
with its node; a node that fails jobs of two users is drained (and put back by the test), while
one tenant failing its own jobs on a node leaves the node in service.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from clusterctl.v1 import cluster_pb2, jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.training import runs_of, train_spec
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

FLOOR = 3  # seconds: the service's progress-hang floor here (the ranks' steps are 0.1 s)


@pytest.fixture(scope="module")
def daemon(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon.reachable_by_jobs(
        stack,
        tmp_path_factory.mktemp("clusterd-sick"),
        extra_env={
            "CLUSTERD_LIVENESS__PROGRESS_HANG_FLOOR_SECONDS": str(FLOOR),
            "CLUSTERD_LIVENESS__STRAGGLER_WINDOW_STEPS": "20",
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


def test_a_rank_blocked_while_it_beats_is_hung_by_progress(daemon: Daemon, stack: Stack) -> None:
    name = f"block-{uuid.uuid4().hex[:6]}"
    spec = train_spec(
        stack, name, "--steps", "400", "--every", "10", "--step-seconds", "0.1", "--block-rank", "1", "--block-at", "15"
    )
    job = daemon.client("alice").submit(spec).job
    restart = restarted(daemon, "alice", job.job_id)
    assert restart.cause == jobs_pb2.TERMINATION_CAUSE_RANK_HUNG and restart.detected_by == "progress", restart
    stuck = restart.detected_at.ToNanoseconds() - restart.failed_at.ToNanoseconds()
    assert FLOOR * 1e9 <= stuck <= 30e9, restart  # not before the floor; found within 30 s
    assert "rank 1 on " in restart.detail and "at step 14" in restart.detail, restart.detail
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


def node_of(daemon: Daemon, node: str) -> tuple[bool, str]:
    """Whether Slurm shows ``node`` drained (or draining), and its reason."""
    (n,) = [n for n in daemon.client("root").nodes() if n.name == node]
    return "DRAIN" in n.flags or "DRAIN" in cluster_pb2.NodeState.Name(n.state), n.reason


def hang_on(daemon: Daemon, stack: Stack, user: str, node: str) -> str:
    """A 1-node job of ``user`` on ``node`` whose rank blocks while it beats; its id once restarted."""
    name = f"sick-{uuid.uuid4().hex[:6]}"
    spec = train_spec(
        stack,
        name,
        "--steps",
        "400",
        "--every",
        "10",
        "--step-seconds",
        "0.1",
        "--block-rank",
        "0",
        "--block-at",
        "5",
        nodes=1,
    )
    spec.sbatch_options.append(f"--nodelist={node}")
    job = daemon.client(user).submit(spec).job
    restart = restarted(daemon, user, job.job_id)
    assert restart.detected_by == "progress", restart
    return job.job_id  # type: ignore[no-any-return]


def test_a_node_is_drained_for_two_users_jobs_never_for_one_users(daemon: Daemon, stack: Stack) -> None:
    node = sorted(n.name for n in daemon.client("root").nodes())[-1]
    try:
        with ThreadPoolExecutor(2) as pool:  # the attack: one tenant fails two of its own jobs on the node
            mine = list(pool.map(lambda _: hang_on(daemon, stack, "alice", node), range(2)))
        time.sleep(1)
        assert not node_of(daemon, node)[0], mine  # one tenant's word never takes a node
        theirs = hang_on(daemon, stack, "bob", node)
        _, reason = wait_for(lambda: (s := node_of(daemon, node))[0] and s, timeout=15, what=f"{node} drained")
        assert f"job {theirs} (hang)" in reason and f"job {mine[0]} (hang)" in reason and "2 users" in reason, reason
    finally:
        subprocess.run(
            ["scontrol", "update", f"nodename={node}", "state=resume"], env=stack.slurm_env(), capture_output=True
        )
        wait_for(lambda: not node_of(daemon, node)[0], timeout=30, what=f"{node} back in service")
