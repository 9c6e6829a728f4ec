"""Node health across jobs: a node that keeps failing jobs is drained, never on jobs' claims alone."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

import pytest

from clusterd.errors import SlurmError
from clusterd.ha.leadership import Deposed
from clusterd.liveness import health as health_module
from clusterd.liveness.health import Failure, NodeHealth
from clusterd.slurm.types import NodeState

from ..conftest import USER_A, USER_B
from .test_detection import HANG, INTERVAL, Live, beat_both_then_silence, live  # noqa: F401  (the fixture)

NOW = time.time()  # failures' times are seconds after this (summaries expire by the clock)


def hang(record: int, user: str, at: float = 1000.0) -> Failure:
    return Failure("n1", record, str(record), user, "hang", evidence=False, at=NOW + at)


def death(record: int, user: str, at: float = 1000.0) -> Failure:
    return Failure("n1", record, str(record), user, "node death", evidence=True, at=NOW + at)


def test_one_users_claims_never_drain_however_many_jobs() -> None:
    health = NodeHealth()
    assert [health.blame(hang(r, "mallory", 1000.0 + 100 * r)) for r in range(10)] == [None] * 10


def test_claims_of_several_users_never_drain_the_node_is_a_suspect() -> None:
    """Two colluding accounts (or a neighbour's CPU hog slowing two users' ranks) only make a suspect."""
    health = NodeHealth()
    assert [health.blame(hang(r, user, 1000.0 + 100 * r)) for r, user in enumerate(("a", "b", "c"))] == [None] * 3
    assert health.summary("n1").endswith("; suspect")


def test_a_confirmed_death_and_another_jobs_claim_drain_counts_only_in_the_reason() -> None:
    health = NodeHealth()
    assert health.blame(hang(1, "alice")) is None
    assert health.blame(hang(1, "alice", 1100)) is None  # the same job twice is one job
    verdict = health.blame(death(2, "bob", 1200))
    assert verdict is not None
    # The reason is Slurm's, which every user reads (sinfo -R): counts, no job ids.
    assert verdict.reason == "failed 2 jobs of 2 users in 2 events within 1h (1 hang, 1 node death)"
    assert verdict.jobs == "job 1 (hang), job 2 (node death)"  # for clusterd's log


def test_one_node_death_failing_two_jobs_at_once_is_one_event() -> None:
    health = NodeHealth()
    assert health.blame(death(1, "alice", 1000)) is None
    assert health.blame(death(2, "bob", 1010)) is None  # the same death, seen through the second job
    assert health.blame(death(3, "carol", 1000 + health_module.EVENT_SECONDS + 1)) is not None


def test_a_node_counts_as_drained_only_once_the_drain_was_done() -> None:
    health = NodeHealth()
    health.blame(death(1, "alice", 1000))
    verdict = health.blame(death(2, "bob", 1100))
    assert verdict is not None and health.drained() == []  # not drained (yet): the drain may fail
    again = health.blame(death(3, "carol", 1200))
    assert again is not None  # asked again at the next failure
    health.drained_for("n1", again)
    assert health.drained() == ["n1"] and health.blame(death(4, "dave", 1300)) is None
    assert health.summary("n1") == "failed 4 jobs (4 node death); drained by clusterd"


def test_failures_older_than_the_window_do_not_count() -> None:
    health = NodeHealth(window_seconds=60)
    assert health.blame(death(1, "alice", 1000)) is None
    assert health.blame(death(2, "bob", 1061)) is None


def test_a_node_is_back_only_once_slurm_showed_it_drained_then_usable() -> None:
    health = NodeHealth()
    health.blame(death(1, "alice"))
    verdict = health.blame(death(2, "bob", 1100))
    assert verdict is not None
    health.drained_for("n1", verdict)
    assert not health.observe("n1", out_of_service=False)  # a poll from before the drain
    assert not health.observe("n1", out_of_service=True)
    assert health.observe("n1", out_of_service=False)
    assert health.drained() == [] and health.summary("n1") == ""
    assert health.blame(death(3, "alice", 1200)) is None  # its record starts anew


async def hung_on_node2(live: Live, user: str, *, node1: str = "node1") -> str:  # noqa: F811
    """A job of ``user`` whose rank 0 beats from ``node1`` and rank 1 (on node2) hangs; restarted."""
    job_id, record, token = await live.submit(user)
    for rank, node in ((0, node1), (1, "node2")):
        await live.beat(job_id, record, token, rank, node, step=5, committed_step=4)
    for _ in range(int(HANG / INTERVAL) + 5):  # rank 0 beats on, rank 1 stays silent past the hang timeout
        await asyncio.sleep(INTERVAL)
        await live.beat(job_id, record, token, 0, node1, step=6)
    (found,) = await live.daemon.detector.check_once()
    assert found.cause == "RANK_HUNG" and found.nodes == ("node2",)
    return job_id


async def died_on_node2(live: Live, user: str) -> str:  # noqa: F811
    """A job of ``user`` on node1+node2 whose node2 dies (clusterd's probe confirms it)."""
    job_id, record, token = await live.submit(user)
    live.prober.dead.add("10.0.0.2")
    await beat_both_then_silence(live, job_id, record, token, keep=0)
    (found,) = await live.daemon.detector.check_once()
    assert found.cause == "NODE_FAILURE" and found.nodes == ("node2",)
    live.prober.dead.discard("10.0.0.2")
    return job_id


def node2(live: Live) -> object:  # noqa: F811
    return next(n for n in live.slurm.nodes if n.name == "node2")


async def test_one_tenant_failing_its_own_jobs_on_a_node_never_drains_it(live: Live) -> None:  # noqa: F811
    """The attack: a tenant hangs its own rank on node2 in job after job. Its jobs are restarted;
    node2 stays in service for everyone else."""
    for _ in range(3):
        await hung_on_node2(live, USER_A)
    assert live.slurm.calls["drain_node"] == 0
    assert live.daemon.detector.health.drained() == []


async def test_two_users_hangs_alone_never_drain_a_node(live: Live) -> None:  # noqa: F811
    """Two colluding accounts hang their ranks on node2: their jobs restart, node2 is only a suspect."""
    await hung_on_node2(live, USER_A)
    await hung_on_node2(live, USER_B)
    assert live.slurm.calls["drain_node"] == 0 and live.daemon.detector.health.drained() == []
    assert live.daemon.detector.health.summary("node2") == "failed 2 jobs (2 hang); suspect"


async def test_a_single_node_jobs_hang_is_never_pinned_on_its_node(live: Live) -> None:  # noqa: F811
    """A job whose ranks all run on node2 deadlocks: that is the job's own doing as likely as not."""
    for user in (USER_A, USER_B):
        await hung_on_node2(live, user, node1="node2")
    assert live.daemon.detector.health.summary("node2") == ""


async def drain_due_on_node2(live: Live, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:  # noqa: F811
    """A hang of USER_A's job, then node2's confirmed death under USER_B's job: a drain is due."""
    monkeypatch.setattr(live.daemon.detector.health, "_event", 0.0)  # the test's failures come seconds apart
    return await hung_on_node2(live, USER_A), await died_on_node2(live, USER_B)


async def test_a_hang_and_a_confirmed_death_drain_then_back_once_resumed(
    live: Live,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "clusterd.liveness.detector")
    first, second = await drain_due_on_node2(live, monkeypatch)
    node = node2(live)
    assert node.state == NodeState.DRAINING  # type: ignore[attr-defined]
    assert node.reason.startswith("clusterd: failed 2 jobs of 2 users")  # type: ignore[attr-defined]
    assert first not in node.reason and second not in node.reason  # type: ignore[attr-defined]
    assert f"job {first} (hang)" in caplog.text and f"job {second} (node death)" in caplog.text
    health = live.daemon.detector.health
    assert health.summary("node2") == "failed 2 jobs (1 hang, 1 node death); drained by clusterd"
    assert health.summary("node1") == ""
    await live.daemon.poller.poll_once()
    await live.daemon.detector.check_once()
    live.slurm.nodes = [
        replace(n, state=NodeState.IDLE, reason="") if n.name == "node2" else n for n in live.slurm.nodes
    ]
    await live.daemon.poller.poll_once()
    await live.daemon.detector.check_once()
    assert health.drained() == []  # resumed: its record starts anew


async def test_with_draining_off_a_due_drain_is_logged_and_the_node_not_marked(
    live: Live,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    live.daemon.detector._drain = None  # drain_failing_nodes = false
    drains = live.slurm.calls["drain_node"]
    await drain_due_on_node2(live, monkeypatch)
    assert live.slurm.calls["drain_node"] == drains and live.daemon.detector.health.drained() == []
    assert "would drain it" in caplog.text


async def test_a_failed_drain_leaves_the_node_unmarked(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    async def refuse(node: str, reason: str) -> None:
        raise SlurmError("scontrol: slurmctld unreachable")

    monkeypatch.setattr(live.slurm, "drain_node", refuse)
    await drain_due_on_node2(live, monkeypatch)
    assert live.daemon.detector.health.drained() == []  # the next failure asks again


async def test_a_deposed_replica_drains_nothing(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The drain goes through the fenced path: a replica that lost the lease writes nothing to Slurm."""
    await hung_on_node2(live, USER_A)
    drains = live.slurm.calls["drain_node"]

    async def deposed() -> None:
        raise Deposed("lease lapsed")

    monkeypatch.setattr(live.daemon.leadership, "check", deposed)
    detector = live.daemon.detector
    monkeypatch.setattr(detector.health, "_event", 0.0)
    verdict_due = Failure("node2", 999, "999", USER_B, "node death", evidence=True)
    await detector._blame(verdict_due)
    assert live.slurm.calls["drain_node"] == drains and detector.health.drained() == []


async def test_crashing_ranks_never_count_against_their_node(live: Live) -> None:  # noqa: F811
    """A user's own bad code fails on every node: two users' ranks crashing on node2 drain nothing."""
    for user in (USER_A, USER_B):
        job_id, record, token = await live.submit(user)
        await live.beat(job_id, record, token, 0, step=3)
        await live.beat(job_id, record, token, 1, step=3, exiting=True, exit_code=1)
        (found,) = await live.daemon.detector.check_once()
        assert found.cause == "RANK_FAILED"
    assert live.slurm.calls["drain_node"] == 0 and live.daemon.detector.health.summary("node2") == ""


def test_probe_state_in_the_summary_and_when_a_probe_is_due() -> None:
    health = NodeHealth(event_seconds=1.0)
    health.blame(hang(1, "alice", -100))
    verdict = health.blame(death(2, "bob", -50))
    assert verdict is not None
    health.drained_for("n1", verdict)
    assert health.due_for_probe(10.0) == []  # not seen drained in Slurm yet
    assert health.observe("n1", out_of_service=True) is False
    assert health.due_for_probe(10.0, now=time.time() + 11) == ["n1"] and health.due_for_probe(10.0) == []
    health.probe_started("n1")
    assert health.summary("n1").endswith("drained by clusterd; health probe running")
    assert health.observe("n1", out_of_service=False) is False  # resumed by its own probe: no operator's
    health.probe_failed("n1", "failed (exit 1)")
    assert "drained by clusterd; health probe failed (exit 1) at " in health.summary("n1")
    assert health.observe("n1", out_of_service=False) is False  # a poll from while it was resumed
    assert health.due_for_probe(10.0, now=time.time() + 11) == []  # until Slurm shows it drained again
    health.observe("n1", out_of_service=True)
    assert health.due_for_probe(10.0, now=time.time() + 11) == ["n1"]
    health.returned("n1")
    assert health.drained() == [] and health.summary("n1").startswith("returned to service at ")
    assert health.summary("n1").endswith("(health probe passed)")


def test_only_clusterds_own_drains_are_adopted_from_slurm() -> None:
    health = NodeHealth()
    assert not health.adopt("n1", "clusterd: node n1 unreachable: rank 1 silent")  # a death: marked, not scored
    assert not health.adopt("n2", "bad DIMM")  # the operator's
    assert health.adopt("n3", "clusterd: failed 2 jobs of 2 users in 2 events within 1h (2 node death)")
    assert health.adopt("n4", "clusterd: health probe failed (exit 1); failed 2 jobs of 1 user in 2 events")
    assert health.adopt("n5", "clusterd: health probe did not finish; failed 2 jobs of 2 users in 2 events")
    assert health.drained() == ["n3", "n4", "n5"]
    assert health.reason("n4") == "failed 2 jobs of 1 user in 2 events"
    assert not health.adopt("n3", "clusterd: failed 3 jobs")  # known already


def test_failures_from_before_a_return_to_service_do_not_count() -> None:
    health = NodeHealth(event_seconds=1.0)
    old = Failure("n1", 1, "1", "alice", "node death", evidence=True, at=time.time() - 100)
    health.remember(old)
    health.remember(old)  # remembered twice (recalled again): once
    assert health.summary("n1") == "failed 1 job (1 node death); suspect"
    health.returned("n1")
    health.remember(old)
    assert health.summary("n1").startswith("returned to service at ")
    newer = Failure("n1", 2, "2", "bob", "hang", evidence=False, at=time.time() + 1)
    health.remember(newer)
    assert health.summary("n1").startswith("failed 1 job (1 hang); suspect")
