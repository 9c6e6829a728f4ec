"""The queue cache over each backend and the real stack: partial polls (the commands backend from
24.11 on) see what changes (a job starting, a requeue, another user's job ending) while another
user's pending jobs wait for the next whole read; slurmrestd (23.11 on) reads nothing when no job
changed and the whole queue otherwise; pyslurm reads the whole queue."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from clusterd.slurm import argv, restd, restd_between
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.types import JobPoll, JobState
from clusterd.supervisor.cache import ClusterSnapshot, QueueCache
from tests.support.backends import JobUser, job_user, submit_args
from tests.support.stack import Stack

pytestmark = pytest.mark.slurm

T = TypeVar("T")

_GONE = "99999999"  # followed but unknown to slurmctld: a job that left its memory


async def _until(look: Callable[[], Awaitable[T]], ok: Callable[[T], bool], what: str, timeout: float = 60) -> T:
    """``look()`` every half second until ``ok`` says yes of what it returned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = await look()
        if ok(seen):
            return seen
        await asyncio.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _polled(cache: QueueCache) -> Callable[[], Awaitable[ClusterSnapshot]]:
    """One poll of ``cache``, then its snapshot."""

    async def look() -> ClusterSnapshot:
        await cache.poll_once()
        return cache.snapshot

    return look


async def _quiet_poll_is_unchanged(backend: SlurmBackend) -> bool:
    """Two polls in a row with no job change between them: the second reads nothing (a job of
    another test ending meanwhile makes it whole: tried a few times)."""
    for _ in range(5):
        await backend.poll_jobs(frozenset())
        if (await backend.poll_jobs(frozenset())).unchanged:
            return True
        await asyncio.sleep(1)
    return False


async def test_partial_polls_see_changes_requeues_and_jobs_leaving(
    backend: SlurmBackend, stack: Stack, alice: JobUser
) -> None:
    bob = job_user(stack, "bob")
    release = tuple(int(part) for part in stack.slurm_version.split("."))
    partial = backend.name == "commands" and release >= argv.PARTIAL_QUEUE_FROM
    followed: set[str] = {_GONE}
    cache = QueueCache(backend, interval=3600)

    async def focus() -> frozenset[str]:
        return frozenset(followed)

    cache.focus_on(focus)
    submitted: list[str] = []
    try:
        held = await backend.submit(submit_args(bob, hold=True))
        submitted.append(held)
        own = await backend.submit(submit_args(alice, nodes=1))
        submitted.append(own)
        followed.add(own)
        await cache.poll_once()
        assert cache.snapshot.whole and {held, own} <= set(cache.snapshot.jobs)
        late = await backend.submit(submit_args(bob, hold=True))  # another user's, after the whole read
        submitted.append(late)
        await _until(_polled(cache), lambda s: s.jobs[own].state is JobState.RUNNING, "the followed job to run")
        assert held in cache.snapshot.jobs and _GONE not in cache.snapshot.jobs
        assert (late in cache.snapshot.jobs) is not partial
        assert not (partial and cache.snapshot.whole)

        await backend.requeue(own)
        await _until(
            _polled(cache),
            lambda s: s.jobs[own].state is JobState.PENDING and s.jobs[own].restart_count >= 1,
            "the requeue to show",
        )
        await backend.cancel(held)  # another user's pending job ends: no longer PENDING, so listed
        await _until(_polled(cache), lambda s: s.jobs[held].state is JobState.CANCELLED, "the cancel to show")
        if partial:
            assert cache.whole_polls == 1
        if backend.name == "slurmrestd" and release >= (23, 11):  # update_time: nothing when nothing changed
            assert await _quiet_poll_is_unchanged(backend)
    finally:
        for job_id in submitted:
            await backend.cancel(job_id)


def _listed(poll: JobPoll, job_id: str, state: JobState) -> bool:
    return any(j.job_id == job_id and j.state is state for j in poll.jobs)


async def test_a_big_queues_look_stands_until_a_state_moves(
    backend: SlurmBackend, stack: Stack, alice: JobUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past slurmrestd's whole-reply limit (lowered to nothing here) a poll reads the followed jobs'
    states (``GET jobs/state``) and, every RECHECK_SECONDS, every job's (``squeue --only-job-state``):
    the real endpoints' answers keep a still look standing and show another user's job starting and
    a followed job's requeue."""
    release = tuple(int(part) for part in stack.slurm_version.split("."))
    if backend.name != "slurmrestd" or release < argv.PARTIAL_QUEUE_FROM:
        pytest.skip("the standing look is slurmrestd's, where squeue filters (24.11 on)")
    monkeypatch.setattr(restd, "_WHOLE_REPLY_MAX_JOBS", -1)
    bob = job_user(stack, "bob")
    submitted: list[str] = []
    try:
        own = await backend.submit(submit_args(alice, nodes=1))
        submitted.append(own)
        focus = frozenset({own})

        async def poll() -> JobPoll:
            return await backend.poll_jobs(focus)

        await _until(poll, lambda p: _listed(p, own, JobState.RUNNING), "the followed job to run")
        await _until(poll, lambda p: p.standing, "a still look to stand", timeout=20)
        monkeypatch.setattr(restd_between, "RECHECK_SECONDS", 0.0)  # the queue's states read every poll
        await _until(poll, lambda p: p.standing, "a renewed look", timeout=20)
        other = await backend.submit(submit_args(bob, nodes=1))
        submitted.append(other)
        seen = await _until(poll, lambda p: _listed(p, other, JobState.RUNNING), "bob's job to run")
        assert not seen.standing
        await backend.requeue(own)
        await _until(
            poll,
            lambda p: any(j.job_id == own and j.restart_count >= 1 for j in p.jobs) and not p.standing,
            "the requeue to show",
        )
    finally:
        for job_id in submitted:
            await backend.cancel(job_id)
