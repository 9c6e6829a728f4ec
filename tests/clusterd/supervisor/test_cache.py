"""QueueCache: one queue read per poll, nodes when they can have changed, snapshots to subscribers,
health on change."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

import pytest

import clusterd.supervisor.cache as cache_module
from clusterd.errors import SlurmError
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.topology_text import TopologyParseError
from clusterd.slurm.types import JobState, NodeState, SlurmJob, SlurmSwitch
from clusterd.supervisor.cache import ClusterSnapshot, QueueCache


class Recorder:
    def __init__(self, name: str, order: list[str]) -> None:
        self.name = name
        self.order = order
        self.snapshots: list[ClusterSnapshot] = []

    async def on_snapshot(self, snapshot: ClusterSnapshot) -> None:
        self.order.append(self.name)
        self.snapshots.append(snapshot)


async def test_one_query_per_poll_whatever_the_subscribers() -> None:
    slurm = FakeSlurm.cluster()
    slurm.jobs["7"] = SlurmJob("7", "train", "alice", JobState.RUNNING, nodes=("node1",))
    cache = QueueCache(slurm, interval=60, default_partition="debug")
    order: list[str] = []
    first, second = Recorder("first", order), Recorder("second", order)
    cache.subscribe(first)
    cache.subscribe(second)
    await cache.poll_once()
    await cache.poll_once()
    assert slurm.calls["list_jobs"] == 2 and slurm.calls["list_nodes"] == 1  # nothing moved: nodes kept
    assert slurm.calls["topology"] == 1  # the switch tree only every _TOPOLOGY_EVERY polls
    assert order == ["first", "second", "first", "second"]  # in subscription order, each poll
    assert first.snapshots[-1] is cache.snapshot and cache.snapshot.jobs["7"].nodes == ("node1",)
    assert cache.polls == 2


async def test_nodes_are_read_when_a_job_moves_or_settles_and_on_a_slow_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At idle a poll keeps the last node list (256 nodes cost a read each); a job that starts,
    ends or is still releasing its nodes, a hurry, or the slow clock reads them in the same poll."""
    slurm = FakeSlurm.cluster(leaves=1, per_leaf=2)
    slurm.jobs["7"] = SlurmJob("7", "train", "alice", JobState.PENDING)
    cache = QueueCache(slurm, interval=60)
    now = [1000.0]
    monkeypatch.setattr(cache_module.time, "monotonic", lambda: now[0])

    async def reads_after(change: Callable[[], object]) -> int:
        change()
        before = slurm.calls["list_nodes"]
        await cache.poll_once()
        return slurm.calls["list_nodes"] - before

    def set_state(state: JobState) -> None:
        slurm.jobs["7"] = replace(slurm.jobs["7"], state=state, nodes=("node1",))

    def down() -> None:
        slurm.nodes[1] = replace(slurm.nodes[1], state=NodeState.DOWN)

    assert await reads_after(lambda: None) == 1  # the first poll
    assert await reads_after(lambda: None) == 0  # nothing moved
    assert await reads_after(lambda: slurm.jobs.update(x=SlurmJob("x", "x", "bob", JobState.PENDING))) == 0
    assert await reads_after(lambda: set_state(JobState.RUNNING)) == 1  # started
    assert await reads_after(down) == 0 and cache.snapshot.down_nodes == set()  # a node down, no job moved
    assert await reads_after(lambda: set_state(JobState.COMPLETING)) == 1 and cache.snapshot.down_nodes == {"node2"}
    assert await reads_after(lambda: None) == 1  # still releasing its nodes
    assert await reads_after(lambda: set_state(JobState.COMPLETED)) == 1
    assert await reads_after(lambda: None) == 0
    assert await reads_after(lambda: cache.hurry(5.0)) == 1
    now[0] += 5.0
    assert await reads_after(lambda: None) == 0
    now[0] += cache_module._NODES_EVERY_SECONDS
    assert await reads_after(lambda: None) == 1  # the slow clock


async def test_facts_and_down_nodes_come_from_the_last_poll() -> None:
    slurm = FakeSlurm.cluster(leaves=1, per_leaf=2)
    cache = QueueCache(slurm, interval=60, default_partition="debug")
    assert cache.facts().nodes == frozenset()  # nothing known before the first poll
    slurm.nodes[1] = replace(slurm.nodes[1], state=NodeState.DOWN)
    await cache.poll_once()
    facts = cache.facts()
    assert facts.nodes == {"node1", "node2"} and facts.partitions == {"debug", "batch"}
    assert facts.default_partition == "debug" and facts.slurm_release is None
    cache.slurm_release = (22, 5)  # the server sets it once the release is known
    assert cache.facts().slurm_release == (22, 5)
    assert cache.snapshot.down_nodes == {"node2"}
    assert [s.name for s in cache.snapshot.switches] == ["leaf1", "spine"]


class FlakySlurm(FakeSlurm):
    failing: bool = True

    async def list_jobs(self) -> list[SlurmJob]:
        if self.failing:
            raise SlurmError("squeue", 1, "slurm_load_jobs error: Unable to contact slurm controller")
        return await super().list_jobs()


async def test_run_reports_health_changes_and_the_error() -> None:
    slurm = FlakySlurm(nodes=FakeSlurm.cluster().nodes)
    cache = QueueCache(slurm, interval=0.01)
    cache.set_health(True)
    heard: list[bool] = []
    changed = asyncio.Event()

    def listener(ok: bool) -> None:
        heard.append(ok)
        changed.set()

    cache.subscribe_health(listener)
    stop = asyncio.Event()
    task = asyncio.create_task(cache.run(stop))
    await asyncio.wait_for(changed.wait(), 30)
    assert heard == [False] and "Unable to contact" in cache.last_error and not cache.healthy
    changed.clear()
    slurm.failing = False
    cache.kick()
    await asyncio.wait_for(changed.wait(), 30)
    stop.set()
    await task
    assert heard == [False, True] and cache.healthy and cache.last_error == ""


async def test_a_crashing_subscriber_is_logged_and_leaves_slurm_healthy(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        async def on_snapshot(self, snapshot: ClusterSnapshot) -> None:
            raise RuntimeError("bug")

    cache = QueueCache(FakeSlurm.cluster(), interval=60)
    after = Recorder("after", [])
    cache.subscribe(Broken())
    cache.subscribe(after)
    cache.set_health(True)
    heard: list[bool] = []
    cache.subscribe_health(heard.append)
    stop = asyncio.Event()
    with caplog.at_level(logging.ERROR, "clusterd.supervisor.cache"):
        task = asyncio.create_task(cache.run(stop))
        for _ in range(500):
            if after.snapshots:
                break
            await asyncio.sleep(0.01)
        stop.set()
        await task
    assert cache.healthy and heard == [] and cache.last_error == ""
    assert any(r.exc_info and "bug" in str(r.exc_info[1]) for r in caplog.records)  # with its traceback


class BadTopologySlurm(FakeSlurm):
    topology_error: Exception | None = TopologyParseError("line 1: switch 's1' listed twice")

    async def topology(self) -> list[SlurmSwitch]:
        self.calls["topology"] += 1
        if self.topology_error is not None:
            raise self.topology_error
        return list(self.switches)


async def test_a_failing_topology_keeps_the_old_tree_and_the_poll_counting(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cache_module, "_TOPOLOGY_EVERY", 2)
    slurm = BadTopologySlurm(nodes=FakeSlurm.cluster().nodes, switches=FakeSlurm.cluster().switches)
    cache = QueueCache(slurm, interval=60)
    with caplog.at_level(logging.WARNING, "clusterd.supervisor.cache"):
        for _ in range(4):
            await cache.poll_once()  # never raises: the queue and nodes were read
    assert cache.polls == 4 and slurm.calls["topology"] == 2  # retried at the next refresh only
    assert cache.snapshot.switches == () and len(caplog.records) == 1  # logged once per bad spell
    slurm.topology_error = None
    await cache.poll_once()
    await cache.poll_once()
    assert cache.snapshot.switches and slurm.calls["topology"] == 3
    slurm.topology_error = SlurmError("scontrol", 1, "timed out")
    await cache.poll_once()
    await cache.poll_once()
    assert cache.snapshot.switches and slurm.calls["topology"] == 4  # the previous tree is kept
