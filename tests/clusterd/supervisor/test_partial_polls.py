"""Partial queue polls (releases whose squeue filters): what changes is seen at once, other users'
pending jobs at the next whole read, and nothing the service follows is ever judged from stale data."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

import clusterd.supervisor.cache as cache_module
from clusterd.errors import SlurmError
from clusterd.model.spec import JobSpec
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.types import JobPoll, JobState, SlurmJob, SlurmNode
from clusterd.store.jobs import JobRecords
from clusterd.store.records import Phase
from clusterd.store.store import sqlite_store
from clusterd.supervisor import reconciler
from clusterd.supervisor.cache import QueueCache, merge
from clusterd.supervisor.progress import ProgressBudget, ProgressReader

from ..conftest import supervised


def _job(job_id: str, state: JobState, user: str = "bob", **kw: object) -> SlurmJob:
    return SlurmJob(job_id, "x", user, state, **kw)  # type: ignore[arg-type]


def test_merge_keeps_only_the_pending_jobs_a_partial_look_does_not_cover() -> None:
    before = {
        "1": _job("1", JobState.PENDING),  # someone else's, held: not covered, kept
        "2": _job("2", JobState.RUNNING),  # ended and purged between looks: dropped
        "3": _job("3", JobState.RUNNING, user="alice"),  # followed, requeued: PENDING now
        "4": _job("4", JobState.PENDING, user="alice"),  # followed, vanished: dropped
        "5": _job("5", JobState.PENDING, array_job_id="5", array_pending="1-3"),  # followed array
        "6": _job("6", JobState.RUNNING, array_job_id="5", array_task_id=0),  # its task 0, gone now
    }
    seen = (
        _job("3", JobState.PENDING, user="alice", restart_count=1),
        _job("5", JobState.PENDING, array_job_id="5", array_pending="2-3"),
        _job("7", JobState.RUNNING, array_job_id="5", array_task_id=1),
        _job("8", JobState.CANCELLED),
    )
    after = merge(before, JobPoll(seen, whole=False), frozenset({"3", "4", "5"}))
    assert sorted(after) == ["1", "3", "5", "7", "8"]
    assert after["3"].restart_count == 1 and after["5"].array_pending == "2-3"
    assert merge(before, JobPoll(seen), frozenset()) == {j.job_id: j for j in seen}  # a whole look replaces
    assert merge(before, JobPoll((), whole=False, unchanged=True), frozenset({"3"})) == before


async def _focused(slurm: FakeSlurm, ids: set[str]) -> QueueCache:
    cache = QueueCache(slurm, interval=3600)

    async def focus() -> frozenset[str]:
        return frozenset(ids)

    cache.focus_on(focus)
    await cache.poll_once()
    return cache


async def test_other_users_pending_jobs_wait_for_the_whole_read(monkeypatch: pytest.MonkeyPatch) -> None:
    slurm = FakeSlurm.cluster()
    slurm.partial = True
    slurm.jobs["1"] = _job("1", JobState.PENDING)
    cache = await _focused(slurm, set())
    assert cache.snapshot.whole and slurm.calls["list_jobs"] == 1  # the first look is whole
    slurm.jobs["2"] = _job("2", JobState.PENDING)  # submitted with plain sbatch
    slurm.jobs["3"] = _job("3", JobState.RUNNING, nodes=("node1",))  # another user's, started
    slurm.set_state("1", JobState.RUNNING, nodes=("node2",))
    await cache.poll_once()
    assert not cache.snapshot.whole and slurm.calls["poll_jobs"] == 1 and slurm.calls["list_jobs"] == 1
    assert sorted(cache.snapshot.jobs) == ["1", "3"] and cache.snapshot.jobs["1"].nodes == ("node2",)
    monkeypatch.setattr(cache_module, "_WHOLE_EVERY_SECONDS", 0.0)
    monkeypatch.setattr(cache_module, "_WHOLE_COST_FACTOR", 0.0)
    await cache.poll_once()
    assert cache.snapshot.whole and sorted(cache.snapshot.jobs) == ["1", "2", "3"]


class UnchangedSlurm(FakeSlurm):
    """slurmrestd's update_time: after the first look, "no job changed" until told otherwise."""

    changed = False

    async def poll_jobs(self, focus: frozenset[str]) -> JobPoll:
        self.calls["poll_jobs"] += 1
        if self.changed:
            return JobPoll(tuple(self.jobs.values()), whole=False)
        return JobPoll((), whole=False, unchanged=True)


async def test_slurm_saying_nothing_changed_puts_off_the_whole_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 10,000-job queue is not re-read every _WHOLE_EVERY_SECONDS while Slurm says none changed."""
    now = [1000.0]
    monkeypatch.setattr(cache_module.time, "monotonic", lambda: now[0])
    slurm = UnchangedSlurm.cluster()
    cache = await _focused(slurm, {"1"})
    for _ in range(3):
        now[0] += cache_module._WHOLE_EVERY_SECONDS * 0.75
        await cache.poll_once()
        assert cache.snapshot.whole
    assert slurm.calls["list_jobs"] == 1 and slurm.calls["poll_jobs"] == 3
    slurm.changed = True  # a partial answer: other users' pending jobs may be stale from now on
    now[0] += cache_module._WHOLE_EVERY_SECONDS * 0.75
    await cache.poll_once()
    assert not cache.snapshot.whole and slurm.calls["list_jobs"] == 1
    now[0] += cache_module._WHOLE_EVERY_SECONDS * 0.5
    await cache.poll_once()
    assert cache.snapshot.whole and slurm.calls["list_jobs"] == 2


class StampSlurm(FakeSlurm):
    """slurmrestd's update_time: the stamp moves as soon as a changed queue is handed back, so
    "unchanged" from then on; list_nodes fails while ``nodes_down`` is set."""

    seen: dict[str, SlurmJob] | None = None
    nodes_down = False

    async def poll_jobs(self, focus: frozenset[str]) -> JobPoll:
        self.calls["poll_jobs"] += 1
        if self.seen == self.jobs:
            return JobPoll((), whole=False, unchanged=True)
        self.seen = dict(self.jobs)
        return JobPoll(tuple(self.jobs.values()))

    async def list_jobs(self) -> list[SlurmJob]:
        self.seen = dict(self.jobs)
        return await super().list_jobs()

    async def list_nodes(self) -> list[SlurmNode]:
        if self.nodes_down:
            raise SlurmError("GET nodes", 502, "bad gateway")
        return await super().list_nodes()


async def test_a_change_read_by_a_poll_that_failed_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm's stamp moved past job 7's end in a poll whose node read failed: the next poll reads
    the whole queue instead of trusting "unchanged" since that stamp."""
    now = [1000.0]
    monkeypatch.setattr(cache_module.time, "monotonic", lambda: now[0])
    slurm = StampSlurm.cluster()
    slurm.jobs["7"] = _job("7", JobState.RUNNING, nodes=("node1",))
    cache = await _focused(slurm, {"7"})
    slurm.set_state("7", JobState.COMPLETED)
    slurm.nodes_down = True
    now[0] += 1.0
    with pytest.raises(SlurmError):
        await cache.poll_once()
    slurm.nodes_down = False
    for _ in range(10):
        now[0] += 30.0
        await cache.poll_once()
    assert cache.snapshot.jobs["7"].state == JobState.COMPLETED


async def test_a_followed_job_that_ended_keeps_the_nodes_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the decision on a run that ended waits (the dead nodes may show DOWN a poll later),
    every poll reads the nodes, not one every _NODES_EVERY_SECONDS."""
    now = [1000.0]
    monkeypatch.setattr(cache_module.time, "monotonic", lambda: now[0])
    slurm = FakeSlurm.cluster()
    slurm.partial = True
    slurm.jobs["7"] = _job("7", JobState.RUNNING, nodes=("node1",))
    cache = await _focused(slurm, {"7"})
    slurm.set_state("7", JobState.FAILED)
    now[0] += 1.0
    await cache.poll_once()  # the end moved the job: nodes read
    reads = slurm.calls["list_nodes"]
    now[0] += 1.0
    await cache.poll_once()  # nothing moved, but the run's end is still being judged
    assert slurm.calls["list_nodes"] == reads + 1


async def test_one_very_slow_whole_read_does_not_put_off_the_next_for_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole read stalled for a minute (an event-loop stall counts) does not make the queue's
    other jobs 20 minutes stale: the wait is capped at _WHOLE_MAX_GAP_SECONDS."""
    now = [1000.0]
    monkeypatch.setattr(cache_module.time, "monotonic", lambda: now[0])
    slurm = FakeSlurm.cluster()
    slurm.partial = True
    real = slurm.list_jobs

    async def stalled() -> list[SlurmJob]:
        now[0] += 60.0
        return await real()

    slurm.list_jobs = stalled  # type: ignore[method-assign]
    cache = await _focused(slurm, {"1"})
    now[0] += cache_module._WHOLE_MAX_GAP_SECONDS
    await cache.poll_once()
    assert slurm.calls["list_jobs"] == 2


async def test_a_slow_whole_read_is_made_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole read that takes 10 s (10,000 jobs on a loaded host) comes every 200 s, not every 60."""
    now = [1000.0]
    monkeypatch.setattr(cache_module.time, "monotonic", lambda: now[0])
    slurm = FakeSlurm.cluster()
    slurm.partial = True
    real = slurm.list_jobs

    async def slow() -> list[SlurmJob]:
        now[0] += 10.0
        return await real()

    slurm.list_jobs = slow  # type: ignore[method-assign]
    cache = await _focused(slurm, {"1"})
    for step in (cache_module._WHOLE_EVERY_SECONDS, 100.0):
        now[0] += step
        await cache.poll_once()
        assert slurm.calls["list_jobs"] == 1  # 70 s, then 170 s after the last whole read began
    now[0] += 30.0
    await cache.poll_once()
    assert slurm.calls["list_jobs"] == 2


async def test_want_whole_is_spaced_and_survives_a_failed_read(monkeypatch: pytest.MonkeyPatch) -> None:
    slurm = FakeSlurm.cluster()
    slurm.partial = True
    cache = await _focused(slurm, set())
    cache.want_whole()
    await cache.poll_once()
    assert not cache.snapshot.whole  # the last whole read is not _WANTED_WHOLE_GAP old yet
    monkeypatch.setattr(cache_module, "_WANTED_WHOLE_GAP", 0.0)

    async def down() -> list[SlurmJob]:
        raise SlurmError("squeue", 1, "Unable to contact slurm controller")

    real, slurm.list_jobs = slurm.list_jobs, down  # type: ignore[method-assign]
    with pytest.raises(SlurmError):
        await cache.poll_once()
    slurm.list_jobs = real  # type: ignore[method-assign]
    await cache.poll_once()
    assert cache.snapshot.whole and cache.whole_polls == 2


async def test_no_focus_reads_the_whole_queue_every_poll() -> None:
    slurm = FakeSlurm.cluster()
    slurm.partial = True
    cache = QueueCache(slurm, interval=3600)
    for _ in range(3):
        await cache.poll_once()
    assert slurm.calls["list_jobs"] == 3 and slurm.calls["poll_jobs"] == 0


@dataclass
class World:
    slurm: FakeSlurm
    store: JobRecords
    cache: QueueCache


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    slurm = FakeSlurm.cluster()
    slurm.partial = True
    opened = sqlite_store(tmp_path / "db.sqlite3")
    await opened.open()
    progress = ProgressReader(ProgressBudget(interval=3600))
    cache = supervised(slurm, opened.jobs, _Sink(), progress)
    await cache.poll_once()
    yield World(slurm, opened.jobs, cache)
    progress.close()
    await opened.close()


class _Sink:
    def publish(self, event: object) -> None:
        pass


async def test_a_followed_job_requeued_or_gone_is_seen_by_partial_polls(world: World) -> None:
    rec, _ = await world.store.reserve("alice", "", JobSpec(command=["x"]))
    rec.phase, rec.job_id = Phase.SUBMITTED, "100"
    await world.store.save(rec)
    world.slurm.jobs["100"] = _job("100", JobState.RUNNING, user="alice", nodes=("node1",), comment=rec.comment_tag)
    await world.cache.poll_once()
    world.slurm.jobs["100"] = _job("100", JobState.PENDING, user="alice", restart_count=1, comment=rec.comment_tag)
    await world.cache.poll_once()
    got = await world.store.get_by_job_id("100")
    assert got is not None and got.state == JobState.PENDING and got.restart_count == 1
    assert not world.cache.snapshot.whole
    del world.slurm.jobs["100"]
    for _ in range(3):
        await world.cache.poll_once()
    got = await world.store.get_by_job_id("100")
    assert got is not None and got.terminal and got.final_reason == "job left Slurm's queue"
    assert world.cache.whole_polls == 1  # all seen without reading the whole queue again


async def test_a_partial_poll_never_fails_a_submission_it_could_not_see(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partial poll does not list a pending job no record names: only a whole read may say whether
    a submission whose handler died reached Slurm."""
    monkeypatch.setattr(cache_module, "_WANTED_WHOLE_GAP", 0.0)
    rec, _ = await world.store.reserve("alice", "", JobSpec(command=["x"]))
    await world.cache.poll_once()  # in its grace period: nothing wanted yet
    assert not world.cache.snapshot.whole
    monkeypatch.setattr(reconciler, "_ADOPT_GRACE_SECONDS", 0.0)  # the submit handler is long gone
    world.slurm.jobs["102"] = _job("102", JobState.PENDING, user="alice", comment=rec.comment_tag)
    await world.cache.poll_once()  # partial: not listed, so the reconciler asks for a whole read
    got = await world.store.get_by_record(rec.record_id)
    assert got is not None and got.phase is Phase.SUBMITTING
    await world.cache.poll_once()
    got = await world.store.get_by_record(rec.record_id)
    assert got is not None and got.phase is Phase.SUBMITTED and got.job_id == "102"


class TimedSlurm(FakeSlurm):
    """A whole read taking ``took`` seconds of the cache's clock."""

    took = 20.0
    clock: list[float] = [0.0]

    async def list_jobs(self) -> list[SlurmJob]:
        self.clock[0] += self.took
        return await super().list_jobs()


async def test_a_quick_whole_read_halves_the_cost_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stamped whole read answered "no job changed" in milliseconds must not bring the next real
    20 s read of a big queue back every _WHOLE_EVERY_SECONDS: the cost kept halves instead."""
    now = TimedSlurm.clock = [1000.0]
    monkeypatch.setattr(cache_module.time, "monotonic", lambda: now[0])
    slurm = TimedSlurm.cluster()
    slurm.partial = True
    cache = await _focused(slurm, {"1"})
    assert cache._whole_took == 20.0
    slurm.took = 0.01
    now[0] += cache_module._WHOLE_MAX_GAP_SECONDS
    await cache.poll_once()
    assert cache._whole_took == 10.0  # not 0.01
    slurm.took = 8.0
    now[0] += cache_module._WHOLE_MAX_GAP_SECONDS
    await cache.poll_once()
    assert cache._whole_took == 8.0  # a real read is measured as it is


class StandingSlurm(FakeSlurm):
    """A backend whose partial look stands: the same jobs again, marked standing."""

    look: JobPoll | None = None

    async def poll_jobs(self, focus: frozenset[str]) -> JobPoll:
        self.calls["poll_jobs"] += 1
        if self.look is None:
            self.look = JobPoll(tuple(j for j in self.jobs.values() if j.state != JobState.PENDING), whole=False)
            return self.look
        return replace(self.look, standing=True)


async def test_a_standing_look_keeps_the_queue_without_merging_it_again() -> None:
    slurm = StandingSlurm.cluster()
    slurm.jobs["1"] = _job("1", JobState.PENDING)
    slurm.jobs["2"] = _job("2", JobState.RUNNING, nodes=("node1",))
    cache = await _focused(slurm, {"2"})
    await cache.poll_once()  # the partial look, merged
    merged = cache.snapshot.jobs
    await cache.poll_once()  # the same look, standing
    assert cache.snapshot.jobs is merged and sorted(merged) == ["1", "2"] and not cache.snapshot.whole
    slurm.look = JobPoll((), whole=False)  # a new look (job 2 gone): merged as any
    await cache.poll_once()
    assert sorted(cache.snapshot.jobs) == ["1"]
