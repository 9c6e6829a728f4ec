"""Node health across jobs: a node that keeps failing jobs is drained, never on one tenant's word."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from clusterd.liveness.health import Failure, NodeHealth
from clusterd.slurm.types import NodeState

from ..conftest import USER_A, USER_B
from .test_detection import HANG, INTERVAL, Live, beat_both_then_silence, live  # noqa: F401  (the fixture)


def hang(record: int, user: str, at: float = 1000.0) -> Failure:
    return Failure("n1", record, str(record), user, "hang", evidence=False, at=at)


def death(record: int, user: str, at: float = 1000.0) -> Failure:
    return Failure("n1", record, str(record), user, "node death", evidence=True, at=at)


def test_one_users_claims_never_drain_however_many_jobs() -> None:
    health = NodeHealth()
    assert [health.blame(hang(r, "mallory", 1000.0 + r)) for r in range(10)] == [None] * 10


def test_claims_of_two_users_drain_once_naming_the_jobs() -> None:
    health = NodeHealth()
    assert health.blame(hang(1, "alice")) is None
    assert health.blame(hang(1, "alice", 1001)) is None  # the same job twice is one job
    reason = health.blame(hang(2, "bob", 1002))
    assert reason == "failed 2 jobs of 2 users within 1h: job 1 (hang), job 2 (hang)"
    assert health.blame(hang(3, "carol", 1003)) is None  # drained already
    assert health.drained() == ["n1"]


def test_node_deaths_seen_by_clusterd_drain_whoever_ran_there() -> None:
    health = NodeHealth()
    assert health.blame(death(1, "alice")) is None  # one job: it may be the job
    assert health.blame(death(2, "alice", 1001)) is not None


def test_failures_older_than_the_window_do_not_count() -> None:
    health = NodeHealth(window_seconds=60)
    assert health.blame(hang(1, "alice", 1000)) is None
    assert health.blame(hang(2, "bob", 1061)) is None


def test_a_node_is_back_only_once_slurm_showed_it_drained_then_usable() -> None:
    health = NodeHealth()
    health.blame(death(1, "alice"))
    health.blame(death(2, "bob"))
    assert not health.observe("n1", out_of_service=False)  # a poll from before the drain
    assert not health.observe("n1", out_of_service=True)
    assert health.observe("n1", out_of_service=False)
    assert health.drained() == [] and health.records() == {}
    assert health.blame(death(3, "alice", 1002)) is None  # its record starts anew


async def hung_on_node2(live: Live, user: str) -> str:  # noqa: F811
    """A job of ``user`` on node1+node2 whose rank 1 (on node2) hangs; restarted for it."""
    job_id, record, token = await live.submit(user)
    await beat_both_then_silence(live, job_id, record, token, keep=0)
    for _ in range(int(HANG / INTERVAL) + 1):  # rank 0 beats on, rank 1 stays silent past the hang timeout
        await asyncio.sleep(INTERVAL)
        await live.beat(job_id, record, token, 0, step=6)
    (found,) = await live.daemon.detector.check_once()
    assert found.cause == "RANK_HUNG" and found.nodes == ("node2",)
    return job_id


async def test_one_tenant_failing_its_own_jobs_on_a_node_never_drains_it(live: Live) -> None:  # noqa: F811
    """The attack: a tenant hangs its own rank on node2 in job after job. Its jobs are restarted;
    node2 stays in service for everyone else."""
    for _ in range(3):
        await hung_on_node2(live, USER_A)
    assert live.slurm.calls["drain_node"] == 0
    assert live.daemon.detector.health.drained() == []


async def test_a_node_that_fails_two_users_jobs_is_drained_then_back_once_resumed(live: Live) -> None:  # noqa: F811
    first = await hung_on_node2(live, USER_A)
    assert live.slurm.calls["drain_node"] == 0
    second = await hung_on_node2(live, USER_B)
    assert live.slurm.calls["drain_node"] == 1
    (node2,) = [n for n in live.slurm.nodes if n.name == "node2"]
    assert node2.state == NodeState.DRAINING and f"job {first}" in node2.reason and f"job {second}" in node2.reason
    summary = live.daemon.detector.health.summary("node2")
    assert summary == "failed 2 jobs (2 hang); drained by clusterd"  # other users' jobs counted, not named
    assert live.daemon.detector.health.summary("node1") == ""
    await live.daemon.poller.poll_once()
    await live.daemon.detector.check_once()
    live.slurm.nodes = [
        replace(n, state=NodeState.IDLE, reason="") if n.name == "node2" else n for n in live.slurm.nodes
    ]
    await live.daemon.poller.poll_once()
    await live.daemon.detector.check_once()
    assert live.daemon.detector.health.drained() == []  # resumed: its record starts anew


async def test_crashing_ranks_never_count_against_their_node(live: Live) -> None:  # noqa: F811
    """A user's own bad code fails on every node: two users' ranks crashing on node2 drain nothing."""
    for user in (USER_A, USER_B):
        job_id, record, token = await live.submit(user)
        await live.beat(job_id, record, token, 0, step=3)
        await live.beat(job_id, record, token, 1, step=3, exiting=True, exit_code=1)
        (found,) = await live.daemon.detector.check_once()
        assert found.cause == "RANK_FAILED"
    assert live.slurm.calls["drain_node"] == 0 and live.daemon.detector.health.records() == {}
