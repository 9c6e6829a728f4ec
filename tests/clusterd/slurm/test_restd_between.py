"""A big queue's partial look stands while the followed jobs' states (``GET jobs/state``) hold, for
at most RECHECK_SECONDS and never across a change the service made itself; and a periodic whole
read of it costs one small request while Slurm says no job changed."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from clusterd.slurm import restd_between
from clusterd.slurm.restd import RestdBackend
from clusterd.slurm.restd_between import Between, state_query
from clusterd.slurm.restd_http import HttpFailure
from clusterd.slurm.types import JobPoll, JobState, SlurmJob
from tests.support.backends import FakeRestdHttp, Sent, SqueueFallback, answer, restd_backend

_MANY = [{"job_id": n, "name": "x", "user_name": "bob", "job_state": ["PENDING"]} for n in range(1, 2002)]


class _Restd:
    """slurmrestd's answers: the whole queue on GET jobs, ``state`` for job 7 on GET jobs/state."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.state = "RUNNING"
        self.state_status = 200

    def __call__(self, request: Sent) -> Any:
        self.sent.append(request.path)
        if "/jobs/state/" in request.path:
            if self.state_status != 200:
                return answer(self.state_status, text="Unable to find requested URL endpoint.")
            return answer(200, json={"jobs": [{"job_id": "7", "state": [self.state]}], "errors": []})
        if "update_time=" in request.path:
            return answer(304)
        return answer(200, json={"jobs": _MANY, "last_update": {"set": True, "number": 1000}, "errors": []})

    def states_asked(self) -> list[str]:
        return [p for p in self.sent if "/jobs/state/" in p]


async def _big(tmp_path: Path) -> tuple[RestdBackend, _Restd, SqueueFallback]:
    restd, squeue = _Restd(), SqueueFallback()
    backend = restd_backend(tmp_path, restd, fallback=squeue, restd_api_version="v0.0.45")
    assert len(await backend.list_jobs()) == 2001
    return backend, restd, squeue


async def test_the_last_look_stands_while_the_followed_states_hold(tmp_path: Path) -> None:
    backend, restd, squeue = await _big(tmp_path)
    for _ in range(3):
        await backend.poll_jobs(frozenset({"7"}))
    assert squeue.polls == 1
    assert restd.states_asked() == ["/slurm/v0.0.45/jobs/state/?job_id=7"] * 3
    restd.state = "COMPLETING"  # the followed job moved: a new look at once
    await backend.poll_jobs(frozenset({"7"}))
    assert squeue.polls == 2
    await backend.poll_jobs(frozenset({"7", "8"}))  # another job followed: its look is due
    assert squeue.polls == 3


async def test_past_recheck_seconds_a_look_stands_only_while_no_job_changed_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every RECHECK_SECONDS the whole queue's ids and states (one cheap squeue): the same lines as
    before the look renew it; another user's job starting, ending or arriving means a new look."""
    backend, _, squeue = await _big(tmp_path)
    await backend.poll_jobs(frozenset({"7"}))
    assert (squeue.queue_reads, squeue.polls) == (1, 1)
    monkeypatch.setattr(restd_between, "RECHECK_SECONDS", 0.0)
    again = await backend.poll_jobs(frozenset({"7"}))
    assert again.standing and (squeue.queue_reads, squeue.polls) == (2, 1)
    squeue.queue += "2 RUNNING\n"
    again = await backend.poll_jobs(frozenset({"7"}))
    assert not again.standing and (squeue.queue_reads, squeue.polls) == (3, 2)


async def test_a_change_the_service_made_voids_the_look(tmp_path: Path) -> None:
    """A hold changes no state: the look taken before it must not stand after it."""
    backend, _, squeue = await _big(tmp_path)
    await backend.poll_jobs(frozenset({"7"}))
    await backend.hold("7", user="bob")
    await backend.poll_jobs(frozenset({"7"}))
    assert (squeue.holds, squeue.polls) == (["7"], 2)


def test_a_look_taken_across_a_change_is_not_kept() -> None:
    """A poll whose states were read before a hold and whose look ended after it keeps nothing."""
    between = Between()
    poll = JobPoll((), whole=False)
    mark = between.mark()
    with between.changing():
        pass
    between.remember(poll, frozenset({"7"}), ("s",), "q", mark)
    assert between.standing(frozenset({"7"}), ("s",)) is None
    assert between.renewed(frozenset({"7"}), ("s",), "q") is None
    between.remember(poll, frozenset({"7"}), ("s",), "q", between.mark())
    again = between.standing(frozenset({"7"}), ("s",))
    assert again is not None and again.standing and again.jobs is poll.jobs


async def test_nothing_followed_asks_no_states(tmp_path: Path) -> None:
    backend, restd, squeue = await _big(tmp_path)
    for _ in range(2):
        await backend.poll_jobs(frozenset())
    assert (squeue.polls, restd.states_asked()) == (1, [])


async def test_a_refused_state_read_means_a_look_every_poll(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    backend, restd, squeue = await _big(tmp_path)
    restd.state_status = 404
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            await backend.poll_jobs(frozenset({"7"}))
    assert squeue.polls == 3
    assert len(restd.states_asked()) == 1  # asked once, then never again
    assert sum("jobs/state" in r.getMessage() for r in caplog.records) == 1


def test_only_slurm_ids_are_asked_and_never_too_many() -> None:
    assert state_query(frozenset({"12", "7"})) == "job_id=12&job_id=7"
    for odd in ("7;x", "--all", "7&job_id=8", "\u00b2"):
        assert state_query(frozenset({"7", odd})) is None
    assert state_query(frozenset()) == ""
    assert state_query(frozenset(str(n) for n in range(restd_between.MAX_IDS + 1))) is None


async def test_a_whole_read_with_nothing_changed_is_one_small_request(tmp_path: Path) -> None:
    backend, restd, _ = await _big(tmp_path)
    again = await backend.list_jobs()
    assert len(again) == 2001
    assert restd.sent == ["/slurm/v0.0.45/jobs", "/slurm/v0.0.45/jobs?update_time=1000"]


async def test_a_whole_read_voids_the_look_before_it(tmp_path: Path) -> None:
    """The cache's snapshot after a whole read must never be overwritten by an older look."""
    backend, _, squeue = await _big(tmp_path)
    await backend.poll_jobs(frozenset({"7"}))
    await backend.list_jobs()
    await backend.poll_jobs(frozenset({"7"}))
    assert squeue.polls == 2


@pytest.mark.parametrize(("status", "retried"), [(404, False), (500, True)])
async def test_a_failed_state_read_is_retried_unless_the_endpoint_is_missing(
    tmp_path: Path, status: int, retried: bool
) -> None:
    backend, restd, squeue = await _big(tmp_path)
    restd.state_status = status
    await backend.poll_jobs(frozenset({"7"}))
    await backend.poll_jobs(frozenset({"7"}))  # still in the first failure's pause
    assert len(restd.states_asked()) == 1
    backend._states_refused_until -= restd_between.RETRY_SECONDS + 1  # the pause has passed
    restd.state_status = 200
    await backend.poll_jobs(frozenset({"7"}))
    assert len(restd.states_asked()) == (2 if retried else 1)
    assert squeue.polls == 3


async def test_an_unreachable_slurmrestd_still_gets_a_filtered_look(tmp_path: Path) -> None:
    """The state read is an economy: without slurmrestd the poll looks with squeue, as before it."""
    backend, _, squeue = await _big(tmp_path)

    def down(request: Sent) -> Any:
        raise HttpFailure("connection refused")

    backend._client = FakeRestdHttp(down)  # type: ignore[assignment]
    poll = await backend.poll_jobs(frozenset({"7"}))
    assert (poll.whole, squeue.polls) == (False, 1)


async def test_a_focus_with_anything_but_slurm_ids_is_looked_at_every_poll(tmp_path: Path) -> None:
    backend, restd, squeue = await _big(tmp_path)
    for _ in range(2):
        await backend.poll_jobs(frozenset({"7", "7_1"}))
    assert (squeue.polls, restd.states_asked()) == (2, [])


async def test_a_look_listing_a_pending_job_is_taken_again_every_poll(tmp_path: Path) -> None:
    """A requeued job's reason turns BeginTime at Slurm's next pass, its state PENDING throughout,
    and its release waits for that reason: a look listing it must not stand."""
    backend, _, squeue = await _big(tmp_path)
    squeue.listed = (SlurmJob("7", "x", "alice", JobState.PENDING, reason="None"),)
    for _ in range(3):
        await backend.poll_jobs(frozenset({"7"}))
    assert squeue.polls == 3


async def test_a_failed_job_state_squeue_takes_the_look_and_renews_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, _, squeue = await _big(tmp_path)
    squeue.queue_fails = True
    await backend.poll_jobs(frozenset({"7"}))  # no error: the look is taken
    monkeypatch.setattr(restd_between, "RECHECK_SECONDS", 0.0)
    await backend.poll_jobs(frozenset({"7"}))  # no queue read to renew it with: a look again
    assert (squeue.queue_reads, squeue.polls) == (2, 2)
