"""Elastic restarts: a -N MIN-MAX job that runs again on fewer nodes says so in its restart record.

Reconciler + Restarter over FakeSlurm and a real JobRecords; Slurm's own requeue after a node death
is played by hand (PENDING with the restart count bumped, then RUNNING on the nodes left).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from clusterd.api.convert import job_status
from clusterd.model.causes import Cause
from clusterd.model.spec import JobSpec
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.types import JobState, NodeState, SlurmJob
from clusterd.store.jobs import JobRecords
from clusterd.store.records import JobRecord, Phase, RestartEntry
from clusterd.store.store import sqlite_store
from clusterd.supervisor.cache import QueueCache
from clusterd.supervisor.events import JobEvent
from clusterd.supervisor.policy import resumed
from clusterd.supervisor.progress import ProgressBudget, ProgressReader

from ..conftest import supervised

THREE = ("node1", "node2", "node3")


class _Sink:
    def publish(self, event: JobEvent) -> None:
        pass


@dataclass
class World:
    slurm: FakeSlurm
    store: JobRecords
    cache: QueueCache
    progress: ProgressReader

    async def elastic_job(self, job_id: str, uri: str = "") -> None:
        spec = JobSpec(command=["train"], nodes=2, max_nodes=3, checkpoint_uri=uri)
        rec, _ = await self.store.reserve("alice", "", spec)
        rec.phase, rec.job_id = Phase.SUBMITTED, job_id
        await self.store.save(rec)
        self.slurm.jobs[job_id] = SlurmJob(job_id, "train", "alice", JobState.PENDING, comment=rec.comment_tag)

    async def record(self, job_id: str) -> JobRecord:
        rec = await self.store.get_by_job_id(job_id)
        assert rec is not None
        return rec

    async def lose_node(self, job_id: str, node: str) -> None:
        """Slurm's own requeue after ``node`` died: PENDING on its begin time, restart count bumped."""
        self.mark_down(node)
        restarts = self.slurm.jobs[job_id].restart_count + 1
        self.slurm.set_state(job_id, JobState.PENDING, nodes=(), restart_count=restarts, reason="BeginTime")
        await self.cache.poll_once()

    def mark_down(self, node: str) -> None:
        self.slurm.nodes = [replace(n, state=NodeState.DOWN) if n.name == node else n for n in self.slurm.nodes]


# Every test twice: polls that read the whole queue (22.05) and partial ones (24.11 on).
@pytest.fixture(params=[False, True], ids=["whole", "partial"])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    slurm = FakeSlurm.cluster()
    slurm.partial = request.param
    opened = sqlite_store(tmp_path / "db.sqlite3")
    await opened.open()
    store = opened.jobs
    progress = ProgressReader(ProgressBudget(interval=3600), lister=lambda uri, keys, deadline: -1)
    cache = supervised(slurm, store, _Sink(), progress)
    yield World(slurm, store, cache, progress)
    await opened.close()


def test_resumed_names_a_change_of_world_size_only() -> None:
    entry = RestartEntry(Cause.NODE_FAILURE, ("node3",), 1.0, 40, detail="node failure on node3", nodes_before=3)
    shrunk = resumed(entry, 2)
    assert shrunk.nodes_after == 2 and shrunk.detail == "node failure on node3; resumed on 2 nodes (was 3)"
    assert resumed(replace(entry, detail=""), 1).detail == "resumed on 1 node (was 3)"
    same = resumed(entry, 3)
    assert same.nodes_after == 3 and same.detail == entry.detail
    unknown = resumed(replace(entry, nodes_before=0), 2)  # a requeue of a job that never ran
    assert unknown.nodes_after == 2 and unknown.detail == entry.detail


async def test_job_that_lost_a_node_restarts_on_fewer_and_the_record_says_so(world: World) -> None:
    await world.elastic_job("7")
    world.slurm.set_state("7", JobState.RUNNING, nodes=THREE)
    await world.cache.poll_once()
    await world.lose_node("7", "node3")
    (entry,) = (await world.record("7")).restarts
    assert entry.cause == "NODE_FAILURE" and entry.failed_nodes == ("node3",)
    assert (entry.nodes_before, entry.nodes_after) == (3, 0)
    # The release excludes the dead node and nothing else: no node count or nodelist is pinned,
    # so Slurm may start the job on the MIN of its range.
    assert world.slurm.jobs["7"].excluded_nodes == ("node3",)
    assert world.slurm.calls["update_job"] >= 1
    world.slurm.set_state("7", JobState.RUNNING, nodes=("node1", "node2"), reason="")
    await world.cache.poll_once()
    await world.cache.poll_once()  # later looks change nothing
    rec = await world.record("7")
    (entry,) = rec.restarts
    assert (entry.nodes_before, entry.nodes_after) == (3, 2)
    assert entry.detail == "node failure on node3; resumed on 2 nodes (was 3)"
    (msg,) = job_status(rec).restarts
    assert (msg.nodes_before, msg.nodes_after) == (3, 2) and "resumed on 2 nodes (was 3)" in msg.detail


async def test_restart_on_as_many_nodes_records_the_count_without_a_change(world: World) -> None:
    await world.elastic_job("8")
    world.slurm.set_state("8", JobState.RUNNING, nodes=THREE)
    await world.cache.poll_once()
    await world.lose_node("8", "node3")
    world.slurm.set_state("8", JobState.RUNNING, nodes=("node1", "node2", "node4"), reason="")
    await world.cache.poll_once()
    (entry,) = (await world.record("8")).restarts
    assert (entry.nodes_before, entry.nodes_after) == (3, 3) and entry.detail == "node failure on node3"


async def test_each_restart_records_its_own_next_run(world: World) -> None:
    await world.elastic_job("9")
    world.slurm.set_state("9", JobState.RUNNING, nodes=THREE)
    await world.cache.poll_once()
    await world.lose_node("9", "node3")
    world.slurm.set_state("9", JobState.RUNNING, nodes=("node1", "node2"), reason="")
    await world.cache.poll_once()
    await world.lose_node("9", "node2")
    first, second = (await world.record("9")).restarts
    assert (first.nodes_before, first.nodes_after) == (3, 2)
    assert (second.nodes_before, second.nodes_after) == (2, 0)  # not started again yet
    world.slurm.set_state("9", JobState.RUNNING, nodes=("node1",), reason="")
    await world.cache.poll_once()
    first, second = (await world.record("9")).restarts
    assert (first.nodes_after, second.nodes_after) == (2, 1)
    assert second.detail.endswith("resumed on 1 node (was 2)")


async def test_nodes_dropped_while_the_run_ends_still_count_as_the_run(world: World) -> None:
    """Slurm drops a dead node from the job's list while the survivors clean up, then requeues."""
    await world.elastic_job("10")
    world.slurm.set_state("10", JobState.RUNNING, nodes=THREE)
    await world.cache.poll_once()
    world.slurm.set_state("10", JobState.COMPLETING, nodes=("node1", "node2"))
    await world.cache.poll_once()
    assert (await world.record("10")).nodes == THREE
    await world.lose_node("10", "node3")
    (entry,) = (await world.record("10")).restarts
    assert entry.cause == "NODE_FAILURE" and entry.failed_nodes == ("node3",) and entry.nodes_before == 3


async def test_the_first_look_at_an_ending_decides_its_cause(world: World) -> None:
    """While the decision waits for a progress read, Slurm moves on: the dead node leaves the
    ending job's list (the restart count already bumped), then the job turns PENDING."""
    await world.elastic_job("11", uri="s3://bucket/run")
    world.slurm.set_state("11", JobState.RUNNING, nodes=THREE)
    await world.cache.poll_once()
    await world.progress.read_due()
    world.mark_down("node3")
    world.slurm.set_state("11", JobState.COMPLETING, nodes=("node1", "node2"), restart_count=1)
    await world.cache.poll_once()
    assert not (await world.record("11")).restarts  # waiting for a fresh progress read
    world.slurm.set_state("11", JobState.PENDING, nodes=(), restart_count=1, reason="BeginTime")
    await world.cache.poll_once()
    await world.progress.read_due()
    await world.cache.poll_once()
    (entry,) = (await world.record("11")).restarts
    assert entry.cause == "NODE_FAILURE" and entry.failed_nodes == ("node3",) and entry.nodes_before == 3


async def test_a_later_look_names_a_dead_node_the_first_did_not_see_down(world: World) -> None:
    await world.elastic_job("12", uri="s3://bucket/run")
    world.slurm.set_state("12", JobState.RUNNING, nodes=THREE)
    await world.cache.poll_once()
    await world.progress.read_due()
    world.slurm.set_state("12", JobState.COMPLETING, nodes=("node1", "node2"), restart_count=1)
    await world.cache.poll_once()  # node3 not DOWN yet in sinfo: looks like a plain requeue
    world.mark_down("node3")
    await world.cache.poll_once()
    await world.progress.read_due()
    await world.cache.poll_once()
    (entry,) = (await world.record("12")).restarts
    assert entry.cause == "NODE_FAILURE" and entry.failed_nodes == ("node3",) and entry.nodes_before == 3
