"""Array jobs under the Reconciler + Restarter, over FakeSlurm and a real JobRecords.

Per-task state (what squeue shows for each ID_TASK), the array's derived state and end, and the
restart policy applied to one task at a time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from clusterd.model.causes import Cause
from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec, RestartPolicy
from clusterd.slurm.arrays import task_indices
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.request import ArraySpec, JobRequest
from clusterd.slurm.types import JobState
from clusterd.store.jobs import JobRecords
from clusterd.store.records import JobRecord, Phase
from clusterd.store.store import sqlite_store
from clusterd.supervisor import reconciler
from clusterd.supervisor.cache import QueueCache
from clusterd.supervisor.events import JobEvent
from clusterd.supervisor.progress import ProgressBudget, ProgressReader

from ..conftest import supervised


@dataclass
class Events:
    seen: list[JobEvent] = field(default_factory=list)

    def publish(self, event: JobEvent) -> None:
        self.seen.append(event)


@dataclass
class World:
    slurm: FakeSlurm
    store: JobRecords
    events: Events
    cache: QueueCache

    async def array(self, text: str, **policy: object) -> JobRecord:
        """An array submitted through FakeSlurm, recorded as the manager records it."""
        spec = JobSpec(command=["x"], array=text, restart_policy=RestartPolicy(**policy))  # type: ignore[arg-type]
        body, _, limit = text.partition("%")
        array = ArraySpec(task_indices(body), int(limit) if limit else None)
        rec, _ = await self.store.reserve("alice", "", spec, tasks=len(array.indices))
        job_id = await self.slurm.submit(
            JobRequest(script="#!/bin/sh\n", name="arr", user="alice", array=array, comment=rec.comment_tag)
        )
        rec.phase, rec.job_id, rec.array = Phase.SUBMITTED, job_id, array.render()
        await self.store.save(rec)
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
    events = Events()
    progress = ProgressReader(ProgressBudget(interval=3600), lister=lambda uri, keys, deadline: -1)
    cache = supervised(slurm, store, events, progress)
    yield World(slurm, store, events, cache)
    progress.close()
    await opened.close()


async def test_tasks_are_tracked_one_by_one_and_the_array_state_is_derived(world: World) -> None:
    rec = await world.array("0-3%2")
    await world.cache.poll_once()
    assert (await world.get(rec.job_id)).state == JobState.PENDING
    world.slurm.start_task(rec.job_id, 0, nodes=("node1",))
    world.slurm.start_task(rec.job_id, 1, nodes=("node2",))
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)  # read back from the store: per-task state is persisted
    assert rec.state == JobState.RUNNING and rec.nodes == ("node1", "node2")
    assert {i: t.state for i, t in rec.array_tasks.items()} == {0: JobState.RUNNING, 1: JobState.RUNNING}
    world.slurm.set_state(world.slurm.task(rec.job_id, 0), JobState.COMPLETED)
    world.slurm.set_state(world.slurm.task(rec.job_id, 1), JobState.COMPLETED)
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)
    assert rec.state == JobState.PENDING and not rec.terminal  # tasks 2 and 3 still wait
    world.slurm.start_task(rec.job_id, 2, JobState.COMPLETED)
    world.slurm.start_task(rec.job_id, 3, JobState.COMPLETED)  # the last task takes the array's id
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)
    assert rec.terminal and rec.state == JobState.COMPLETED and rec.final_reason == "all 4 tasks completed"
    assert rec.final_cause is Cause.COMPLETED


async def test_a_failed_task_fails_the_array_with_its_exit_code(world: World) -> None:
    rec = await world.array("0-2")
    for task, code in ((0, 0), (1, 3), (2, 0)):
        world.slurm.start_task(rec.job_id, task, JobState.COMPLETED if code == 0 else JobState.FAILED, exit_code=code)
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)
    assert rec.terminal and rec.state == JobState.FAILED and rec.exit_code == 3
    assert rec.array_tasks[1].exit_code == 3 and rec.final_cause is Cause.EXIT_CODE
    assert "task 1" in rec.final_reason
    assert world.slurm.calls["requeue"] == 0  # exit 3 is not retryable by default


async def test_running_while_any_task_runs_even_after_one_failed(world: World) -> None:
    rec = await world.array("0-1")
    world.slurm.start_task(rec.job_id, 0, JobState.FAILED, exit_code=1)
    world.slurm.start_task(rec.job_id, 1, JobState.RUNNING, nodes=("node3",))
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)
    assert rec.state == JobState.RUNNING and not rec.terminal and rec.exit_code == 1


async def test_a_failed_task_is_requeued_alone_with_its_own_budget(world: World) -> None:
    rec = await world.array("0-1", retryable_exit_codes=[7], max_restarts=1)
    world.slurm.start_task(rec.job_id, 0, JobState.RUNNING)
    world.slurm.start_task(rec.job_id, 1, JobState.FAILED, exit_code=7)
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)
    assert world.slurm.calls["requeue"] == 1
    task1 = world.slurm.jobs[world.slurm.task(rec.job_id, 1)]
    assert task1.state == JobState.PENDING and task1.restart_count == 1  # only task 1 went back
    assert world.slurm.jobs[world.slurm.task(rec.job_id, 0)].state == JobState.RUNNING
    assert rec.array_tasks[1].restart_count == 1 and rec.restart_count == 1
    assert rec.restarts[-1].detail.startswith("task 1: ")
    assert any(e.type == EventType.RESTARTED for e in world.events.seen)
    await world.cache.poll_once()  # Slurm shows the requeue: nothing more is decided
    assert world.slurm.calls["requeue"] == 1
    world.slurm.set_state(task1.job_id, JobState.FAILED, exit_code=7)  # fails again: budget of 1 spent
    world.slurm.set_state(world.slurm.task(rec.job_id, 0), JobState.COMPLETED)
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)
    assert world.slurm.calls["requeue"] == 1
    assert rec.terminal and rec.state == JobState.FAILED and rec.exit_code == 7


async def test_a_cancelled_task_is_never_requeued(world: World) -> None:
    rec = await world.array("0-1", retryable_exit_codes=[7])
    world.slurm.start_task(rec.job_id, 0, JobState.RUNNING)
    await world.cache.poll_once()
    await world.slurm.cancel(f"{rec.job_id}_1")  # a pending task: Slurm splits it out, cancelled
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)
    assert rec.array_tasks[1].state == JobState.CANCELLED and rec.state == JobState.RUNNING
    assert world.slurm.jobs[world.slurm.task(rec.job_id, 0)].state == JobState.RUNNING
    assert world.slurm.calls["requeue"] == 0


async def test_a_pending_task_cancelled_out_of_the_range_ends_cancelled(world: World) -> None:
    """22.05 drops ``scancel A_T`` of a pending task from the pending range and lists no element
    for it: the task has ended, the array ends once the others do, and why the rest waits shows
    while a task runs."""
    rec = await world.array("1-4%1")
    world.slurm.start_task(rec.job_id, 1, JobState.RUNNING, nodes=("node1",))
    world.slurm.jobs[rec.job_id] = replace(world.slurm.jobs[rec.job_id], reason="JobArrayTaskLimit")
    await world.slurm.cancel(f"{rec.job_id}_3")
    assert world.slurm.jobs[rec.job_id].array_pending == "2,4%1"
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)
    assert rec.array_tasks[3].state == JobState.CANCELLED and 2 not in rec.array_tasks
    assert rec.state == JobState.RUNNING and rec.reason == "JobArrayTaskLimit"
    world.slurm.set_state(world.slurm.task(rec.job_id, 1), JobState.COMPLETED)
    world.slurm.start_task(rec.job_id, 2, JobState.COMPLETED)
    world.slurm.start_task(rec.job_id, 4, JobState.COMPLETED)
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)
    assert rec.terminal and rec.state == JobState.CANCELLED and rec.final_cause is Cause.CANCELLED
    assert world.slurm.calls["requeue"] == 0


async def test_cancelling_the_pending_range_ends_its_tasks(world: World) -> None:
    """``scancel A`` of a held array: its record turns CANCELLED and keeps the task string."""
    rec = await world.array("0-3")
    world.slurm.set_state(rec.job_id, JobState.CANCELLED, end_time=1.0)
    await world.cache.poll_once()
    rec = await world.get(rec.job_id)
    assert rec.terminal and {t.state for t in rec.array_tasks.values()} == {JobState.CANCELLED}
    assert len(rec.array_tasks) == 4


async def test_list_rows_stay_compact(world: World) -> None:
    """Only started tasks are stored; a large pending array costs nothing per task in its row."""
    rec = await world.array("0-999")
    world.slurm.start_task(rec.job_id, 5, JobState.RUNNING)
    await world.cache.poll_once()
    (row,) = await world.store.list(user="alice", include_finished=True, limit=10)
    assert row.array == "0-999" and list(row.array_tasks) == [5] and row.spec == JobSpec()


async def test_a_crashed_array_submission_is_adopted_under_the_arrays_id(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by any task's tag, the record takes the array's id (not the task's own job id)."""
    spec = JobSpec(command=["x"], array="0-1")
    rec, _ = await world.store.reserve("alice", "req-1", spec, tasks=2)
    request = JobRequest(
        script="#!/bin/sh\n", name="arr", user="alice", comment=rec.comment_tag, array=ArraySpec((0, 1))
    )
    array_id = await world.slurm.submit(request)
    world.slurm.start_task(array_id, 0, JobState.RUNNING)
    monkeypatch.setattr(reconciler, "_ADOPT_GRACE_SECONDS", 0.0)  # the submit handler is long gone
    await world.cache.poll_once()
    adopted = await world.get(array_id)
    assert adopted.record_id == rec.record_id and adopted.phase is Phase.SUBMITTED and adopted.array == "0-1"
    assert adopted.array_tasks[0].state == JobState.RUNNING and adopted.state == JobState.RUNNING


async def test_a_job_older_than_the_record_is_not_its_crashed_submission(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new store numbers records from 1 again: an earlier store's job with the same tag stays unadopted."""
    rec, _ = await world.store.reserve("alice", "req-1", JobSpec(command=["x"]))
    old = await world.slurm.submit(JobRequest(script="#!/bin/sh\n", name="old", user="alice", comment=rec.comment_tag))
    world.slurm.jobs[old] = replace(world.slurm.jobs[old], submit_time=rec.created - 600)
    monkeypatch.setattr(reconciler, "_ADOPT_GRACE_SECONDS", 0.0)
    await world.cache.poll_once()
    fresh = await world.store.get_by_record(rec.record_id)
    assert fresh is not None and fresh.phase is Phase.FAILED and not fresh.job_id


async def test_a_requeued_task_held_on_begin_time_is_released(world: World) -> None:
    """Slurm holds a requeued task ~120 s (BeginTime); the service starts it now, that task only."""
    rec = await world.array("0-1", retryable_exit_codes=[7])
    world.slurm.start_task(rec.job_id, 0, JobState.RUNNING)
    task1 = world.slurm.start_task(rec.job_id, 1, JobState.FAILED, exit_code=7)
    await world.cache.poll_once()
    assert world.slurm.calls["requeue"] == 1 and world.slurm.calls["update_job"] == 0
    world.slurm.set_state(task1, JobState.PENDING, reason="BeginTime")
    await world.cache.poll_once()
    assert world.slurm.calls["update_job"] == 1
    rec = await world.get(rec.job_id)
    assert rec.state == JobState.RUNNING and rec.array_tasks[1].state == JobState.PENDING
