"""Reconciler + Restarter over FakeSlurm and a real JobRecords: Slurm's view diffed into the store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clusterd.model.causes import Cause
from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec, RestartPolicy
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.store.jobs import JobRecords
from clusterd.store.records import JobRecord, Phase
from clusterd.store.store import sqlite_store
from clusterd.supervisor.cache import QueueCache
from clusterd.supervisor.events import JobEvent
from clusterd.supervisor.progress import ProgressBudget, ProgressReader
from clusterd.supervisor.reconciler import observe

from ..conftest import supervised


@dataclass
class Events:
    seen: list[JobEvent] = field(default_factory=list)

    def publish(self, event: JobEvent) -> None:
        self.seen.append(event)

    def types(self) -> list[EventType]:
        return [e.type for e in self.seen]


@dataclass
class Steps:
    """The progress reader's store: a step per URI; every call is counted."""

    by_uri: dict[str, int] = field(default_factory=dict)
    calls: int = 0

    def __call__(self, uri: str, max_keys: int, deadline: float) -> int:
        self.calls += 1
        return self.by_uri.get(uri, -1)


@dataclass
class World:
    slurm: FakeSlurm
    store: JobRecords
    events: Events
    steps: Steps
    progress: ProgressReader
    cache: QueueCache
    kicks: list[int]

    async def job(self, job_id: str, *, uri: str = "", **policy: object) -> JobRecord:
        spec = JobSpec(command=["x"], checkpoint_uri=uri, restart_policy=RestartPolicy(**policy))  # type: ignore[arg-type]
        rec, _ = await self.store.reserve("alice", "", spec)
        rec.phase, rec.job_id = Phase.SUBMITTED, job_id
        await self.store.save(rec)
        self.slurm.jobs[job_id] = SlurmJob(job_id, "x", "alice", JobState.PENDING, comment=rec.comment_tag)
        return rec

    async def get(self, job_id: str) -> JobRecord:
        rec = await self.store.get_by_job_id(job_id)
        assert rec is not None
        return rec


# Every test twice: polls that read the whole queue (22.05) and partial ones (24.11 on).
@pytest.fixture(params=[False, True], ids=["whole", "partial"])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    slurm = FakeSlurm.cluster()
    slurm.partial = request.param
    opened = sqlite_store(tmp_path / "db.sqlite3")
    await opened.open()
    store = opened.jobs
    events, steps, kicks = Events(), Steps(), []
    progress = ProgressReader(ProgressBudget(interval=3600), lister=steps)
    cache = supervised(slurm, store, events, progress, kick=lambda: kicks.append(1))
    yield World(slurm, store, events, steps, progress, cache, kicks)
    progress.close()
    await opened.close()


async def test_state_changes_are_saved_and_published_once(world: World) -> None:
    await world.job("100")
    await world.cache.poll_once()
    world.slurm.set_state("100", JobState.RUNNING, nodes=("node1",))
    await world.cache.poll_once()
    await world.cache.poll_once()
    rec = await world.get("100")
    assert rec.state == JobState.RUNNING and rec.nodes == ("node1",)
    changes = [e for e in world.events.seen if e.type == EventType.STATE_CHANGED]
    assert [e.previous_state for e in changes] == [JobState.PENDING]


async def test_a_job_gone_from_slurm_finishes_after_three_polls(world: World) -> None:
    await world.job("100")
    del world.slurm.jobs["100"]
    for _ in range(2):
        await world.cache.poll_once()
    assert not (await world.get("100")).terminal
    await world.cache.poll_once()
    rec = await world.get("100")
    assert rec.terminal and rec.state == JobState.UNKNOWN and rec.final_reason == "job left Slurm's queue"
    assert rec.end_time is not None  # when clusterd let it go: its goodput's wall time ends there
    assert world.events.types()[-1] == EventType.FINISHED


def test_run_0s_start_is_taken_from_run_0_only() -> None:
    rec = JobRecord(1, "alice", "r", JobSpec(), Phase.SUBMITTED, created=0.0, job_id="7")
    observe(rec, SlurmJob("7", "x", "alice", JobState.PENDING, start_time=400.0))  # an estimate
    assert rec.first_start is None
    observe(rec, SlurmJob("7", "x", "alice", JobState.RUNNING, start_time=500.0, restart_count=1))
    assert rec.first_start is None  # first seen after a requeue: run 0 started earlier, unseen


async def test_progress_comes_from_the_table_never_from_the_poll(world: World) -> None:
    await world.job("100", uri="s3://bucket/run")
    world.slurm.set_state("100", JobState.RUNNING, nodes=("node1",))
    world.steps.by_uri["s3://bucket/run"] = 20
    await world.cache.poll_once()
    await world.cache.poll_once()
    assert world.steps.calls == 0  # polls only follow the job; the reader's own task reads
    assert (await world.get("100")).checkpoint_step == -1
    await world.progress.read_due()
    await world.cache.poll_once()
    rec = await world.get("100")
    assert rec.checkpoint_step == 20 and world.steps.calls == 1
    (event,) = [e for e in world.events.seen if e.type == EventType.CHECKPOINT]
    assert event.message == "checkpoint step 20 committed"


async def test_a_timeout_decides_on_a_read_made_after_the_run_ended(world: World) -> None:
    """The last checkpoint often lands just before the end: the decision waits for a fresh read."""
    await world.job("100", uri="s3://bucket/run")
    world.slurm.set_state("100", JobState.RUNNING, nodes=("node1",))
    await world.cache.poll_once()
    await world.progress.read_due()  # no checkpoint yet (-1)
    world.steps.by_uri["s3://bucket/run"] = 5  # committed in the run's last seconds
    world.slurm.set_state("100", JobState.TIMEOUT, nodes=("node1",))
    await world.cache.poll_once()
    assert not (await world.get("100")).terminal and world.slurm.calls["requeue"] == 0  # waiting
    await world.progress.read_due()
    await world.cache.poll_once()
    rec = await world.get("100")
    assert not rec.terminal and rec.restarts[0].cause == "TIME_LIMIT" and rec.restarts[0].checkpoint_step == 5
    assert world.slurm.calls["requeue"] == 1 and world.kicks == [1]


async def test_a_timeout_without_progress_ends_like_under_sbatch(world: World) -> None:
    await world.job("100")
    world.slurm.set_state("100", JobState.RUNNING, nodes=("node1",))
    await world.cache.poll_once()
    world.slurm.set_state("100", JobState.TIMEOUT, nodes=("node1",))
    await world.cache.poll_once()
    rec = await world.get("100")
    assert rec.terminal and rec.final_cause is Cause.TIME_LIMIT and not rec.restarts
    assert "no new checkpoint" in rec.final_reason and world.slurm.calls["requeue"] == 0


async def test_exit_85_is_requeued_as_requested(world: World) -> None:
    await world.job("100")
    world.slurm.set_state("100", JobState.RUNNING, nodes=("node1",))
    await world.cache.poll_once()
    world.slurm.set_state("100", JobState.FAILED, nodes=("node1",), exit_code=85)
    await world.cache.poll_once()
    rec = await world.get("100")
    assert not rec.terminal and [r.cause for r in rec.restarts] == ["REQUEUE_REQUESTED"]
    assert world.slurm.jobs["100"].state == JobState.PENDING and world.events.types()[-1] == EventType.RESTARTED


async def test_an_unknown_progress_does_not_hold_the_decision(world: World) -> None:
    """A store over budget or failing: the decision goes ahead with the last step the record has."""
    await world.job("100", uri="s3://bucket/run")
    world.steps.by_uri = {}

    def broken(uri: str, max_keys: int, deadline: float) -> int:
        raise RecursionError("maximum recursion depth exceeded")

    world.progress._lister = broken
    world.slurm.set_state("100", JobState.RUNNING, nodes=("node1",))
    await world.cache.poll_once()
    await world.progress.read_due()
    assert "RecursionError" in world.progress.reading((await world.get("100")).record_id).error
    world.slurm.set_state("100", JobState.FAILED, nodes=("node1",), exit_code=85)
    await world.cache.poll_once()
    rec = await world.get("100")
    assert [r.cause for r in rec.restarts] == ["REQUEUE_REQUESTED"] and rec.restarts[0].checkpoint_step == -1


async def test_a_completed_checkpointing_job_finishes_without_waiting_for_a_read(world: World) -> None:
    await world.job("100", uri="s3://bucket/run")
    world.slurm.set_state("100", JobState.RUNNING, nodes=("node1",))
    await world.cache.poll_once()
    world.slurm.set_state("100", JobState.COMPLETED, nodes=("node1",))
    await world.cache.poll_once()
    rec = await world.get("100")
    assert rec.terminal and rec.final_reason == "completed" and world.steps.calls == 0


async def test_a_record_locked_by_an_rpc_is_skipped_this_poll_not_waited_for(world: World) -> None:
    await world.job("100")
    await world.job("101")
    await world.cache.poll_once()
    world.slurm.set_state("100", JobState.RUNNING, nodes=("node1",))
    world.slurm.set_state("101", JobState.RUNNING, nodes=("node2",))
    lock = world.store.record_lock((await world.get("100")).record_id)
    async with lock:  # e.g. a cancel waiting on scancel
        await asyncio.wait_for(world.cache.poll_once(), 30)
        assert (await world.get("100")).state == JobState.PENDING  # skipped ...
        assert (await world.get("101")).state == JobState.RUNNING  # ... the others are not held up
    await world.cache.poll_once()
    assert (await world.get("100")).state == JobState.RUNNING  # not marked settled: looked at next poll
