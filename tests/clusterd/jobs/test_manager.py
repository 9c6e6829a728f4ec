"""JobManager's get/list/cancel/requeue with FakeSlurm behind it, Slurm job id reuse included."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from clusterd.auth.identity import Identity
from clusterd.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, ResourceExhausted
from clusterd.jobs.manager import JobManager
from clusterd.model.spec import JobSpec, PlacementPreference
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.request import JobRequest
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.store import jobs as store_jobs
from clusterd.store.jobs import JobRecords
from clusterd.store.records import JobRecord, Phase
from clusterd.store.store import sqlite_store
from clusterd.supervisor import reconciler
from clusterd.supervisor.cache import QueueCache
from clusterd.supervisor.events import EventBus
from clusterd.supervisor.progress import ProgressBudget, ProgressReader

from ..conftest import ADMIN, USER_A, USER_B, make_config, supervised

ALICE, BOB, ROOT = Identity(USER_A), Identity(USER_B), Identity(ADMIN, admin=True)


@dataclass
class World:
    manager: JobManager
    slurm: FakeSlurm
    store: JobRecords
    poller: QueueCache

    async def submit(self, ident: Identity, **kw: object) -> str:
        rec, _ = await self.manager.submit(ident, JobSpec(command=["hostname"], **kw))  # type: ignore[arg-type]
        return rec.job_id

    def lose_slurm_state(self) -> None:
        """What a slurmctld restart without its state files does: the queue is gone, ids start over."""
        self.slurm.jobs.clear()
        self.slurm._ids = itertools.count(100)


def no_placement(job: JobRequest, pref: PlacementPreference) -> tuple[JobRequest, str]:
    return job, "anywhere"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    config = make_config(tmp_path, max_jobs_per_user=3)
    slurm = FakeSlurm.cluster()
    opened = sqlite_store(config.db_path)
    await opened.open()
    store = opened.jobs
    bus = EventBus()
    progress = ProgressReader(ProgressBudget(interval=3600))
    poller = supervised(slurm, store, bus, progress, config.restart, default_partition="debug")
    await poller.poll_once()
    yield World(JobManager(config, slurm, store, poller, bus, no_placement), slurm, store, poller)
    progress.close()
    await opened.close()


async def test_get_resolves_ownership(world: World) -> None:
    job_id = await world.submit(ALICE)
    assert (await world.manager.get(ALICE, job_id)).user == USER_A
    assert (await world.manager.get(ROOT, job_id)).user == USER_A
    with pytest.raises(PermissionDenied):
        await world.manager.get(BOB, job_id)
    with pytest.raises(NotFound):
        await world.manager.get(ALICE, "999999")
    with pytest.raises(InvalidArgument, match="job_id: '1; rm' is not a Slurm job id"):
        await world.manager.get(ALICE, "1; rm")


async def test_list_is_own_jobs_unless_admin(world: World) -> None:
    await world.submit(ALICE)
    await world.submit(BOB)
    own = await world.manager.list(ALICE, user="", include_finished=False, limit=0)
    assert [r.user for r in own] == [USER_A] and own[0].spec == JobSpec()  # compact rows
    assert {r.user for r in await world.manager.list(ROOT, user="*", include_finished=False, limit=0)} == {
        USER_A,
        USER_B,
    }
    with pytest.raises(PermissionDenied):
        await world.manager.list(ALICE, user=USER_B, include_finished=False, limit=0)


async def test_cancel_and_requeue_act_for_the_owner_only(world: World) -> None:
    job_id = await world.submit(ALICE)
    for action in (world.manager.cancel, world.manager.requeue):
        with pytest.raises(PermissionDenied):
            await action(BOB, job_id)
    assert world.slurm.calls["cancel"] == 0 and world.slurm.calls["requeue"] == 0
    rec = await world.manager.requeue(ALICE, job_id)
    assert rec.needs_release and [r.cause for r in rec.restarts] == ["MANUAL_REQUEUE"]
    rec = await world.manager.cancel(ALICE, job_id)
    assert rec.user_cancelled and world.slurm.jobs[job_id].state is JobState.CANCELLED
    with pytest.raises(FailedPrecondition, match="cancelled by its user"):
        await world.manager.requeue(ALICE, job_id)


async def test_quota_counts_live_jobs(world: World) -> None:
    first = await world.submit(ALICE)
    for _ in range(2):
        await world.submit(ALICE)
    with pytest.raises(ResourceExhausted, match="the limit is 3 per user"):
        await world.submit(ALICE)
    await world.submit(BOB)
    world.slurm.set_state(first, JobState.COMPLETED)
    await world.poller.poll_once()
    await world.submit(ALICE)
    assert world.slurm.calls["submit"] == 5


async def test_a_save_that_fails_after_sbatch_is_settled_from_slurm(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm took the job but its record's save failed: the caller hears the error, the record stays
    SUBMITTING, and the reconciler adopts the job tagged with its comment, as after a sbatch whose
    answer was lost."""
    real = store_jobs._update

    def failing_update(conn: object, rec: JobRecord) -> None:
        raise OSError(5, "disk I/O error")

    monkeypatch.setattr(store_jobs, "_update", failing_update)
    with pytest.raises(OSError, match="disk I/O error"):
        await world.submit(ALICE)
    monkeypatch.setattr(store_jobs, "_update", real)
    (job_id,) = world.slurm.jobs
    held = await world.store.get_by_record(1)
    assert held is not None and held.phase is Phase.SUBMITTING
    monkeypatch.setattr(reconciler, "_ADOPT_GRACE_SECONDS", 0.0)
    await world.poller.poll_once()
    rec = await world.store.get_by_job_id(job_id)
    assert rec is not None and rec.phase is Phase.SUBMITTED and rec.user == USER_A


async def test_a_reused_slurm_id_never_lets_the_old_owner_act_on_the_new_job(world: World) -> None:
    old = await world.submit(ALICE)
    world.lose_slurm_state()
    new = await world.submit(BOB)  # Slurm hands out the same id again: this used to wedge submit
    assert new == old
    await world.poller.poll_once()  # ...and the poller
    assert world.poller.healthy or world.poller.last_error == ""
    mine = await world.manager.get(ALICE, old)
    assert mine.superseded and mine.terminal and "newer job" in mine.final_reason
    assert (await world.manager.get(BOB, new)).user == USER_B
    assert (await world.manager.get(ROOT, new)).user == USER_B  # the id's current record
    with pytest.raises(FailedPrecondition, match="gave job id"):
        await world.manager.requeue(ALICE, old)
    assert (await world.manager.cancel(ALICE, old)).superseded  # already over: nothing to cancel
    assert world.slurm.calls["requeue"] == 0 and world.slurm.calls["cancel"] == 0
    assert world.slurm.jobs[new].state is JobState.PENDING
    listed = await world.manager.list(ALICE, user="", include_finished=True, limit=0)
    assert [(r.job_id, r.superseded) for r in listed] == [(old, True)]
    assert [r.user for r in await world.manager.list(BOB, user="", include_finished=False, limit=0)] == [USER_B]
    await world.manager.cancel(BOB, new)
    assert world.slurm.jobs[new].state is JobState.CANCELLED


async def test_the_snapshot_guards_a_reuse_the_store_has_not_seen(world: World) -> None:
    """Slurm reused the id for a job of another record before that record was saved."""
    job_id = await world.submit(ALICE)
    world.lose_slurm_state()
    world.slurm.jobs[job_id] = SlurmJob(job_id, "theirs", USER_B, JobState.PENDING, comment="clusterctl-record:999")
    await world.poller.poll_once()
    with pytest.raises(FailedPrecondition, match="now another submission"):
        await world.manager.requeue(ALICE, job_id)
    assert world.slurm.calls["requeue"] == 0


async def test_watch_ids_are_checked_and_bounded(world: World) -> None:
    assert world.manager.watch_ids(["1", "22"]) == frozenset({"1", "22"})
    with pytest.raises(InvalidArgument, match="job_ids: 'x' is not a Slurm job id"):
        world.manager.watch_ids(["1", "x"])
    with pytest.raises(InvalidArgument, match="more than 1000 ids"):
        world.manager.watch_ids([str(i) for i in range(1001)])
    job_id = await world.submit(ALICE)
    assert (await world.manager.get(ALICE, job_id, with_spec=False)).spec == JobSpec()
    assert (await world.manager.get(ALICE, job_id)).spec.command == ("hostname",)


async def test_the_users_comment_reaches_slurm_before_the_records_tag(world: World) -> None:
    """``--comment`` is the user's; the tag after it still finds a submission whose answer was lost."""
    job_id = await world.submit(ALICE, sbatch_options=["--comment=run 7 of the sweep"])
    assert world.slurm.jobs[job_id].comment == "run 7 of the sweep clusterctl-record:1"
    rec = await world.store.get_by_job_id(job_id)
    assert rec is not None and rec.adopts(world.slurm.jobs[job_id])
    forged = replace(world.slurm.jobs[job_id], comment="x clusterctl-record:1", user=USER_B)
    assert not rec.adopts(forged)  # another user's job carrying the tag is not this record's
