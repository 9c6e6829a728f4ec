"""Straggler eviction: a job restarts without its slow node only when the node costs more than a restart."""

from __future__ import annotations

import logging

import pytest

from clusterd.liveness.eviction import measured_restart_seconds, remaining_seconds, worth_evicting
from clusterd.model.causes import Cause
from clusterd.slurm.types import JobState
from clusterd.store.records import RestartEntry

from .test_detection import Live, live, spare_job  # noqa: F401  (the fixture)


def restart(failed: float, first_step: float | None) -> RestartEntry:
    phases = {"failed": failed, **({"first_step": first_step} if first_step is not None else {})}
    return RestartEntry(Cause.NODE_FAILURE, ("n9",), failed, 4, phases=phases)


def test_a_restart_costs_what_the_jobs_own_restarts_measured() -> None:
    assert measured_restart_seconds([]) is None
    assert measured_restart_seconds([restart(100, None)]) is None  # never reached its first step
    assert measured_restart_seconds([restart(100, 130), restart(200, 290), restart(300, 340)]) == 40


def test_what_is_left_of_the_time_limit() -> None:
    assert remaining_seconds("1:00:00", 1000.0, 1600.0) == 3000.0
    assert remaining_seconds("10", 1000.0, 2000.0) == 0.0  # 10 minutes, long over
    assert remaining_seconds("UNLIMITED", 1000.0, 1600.0) is None
    assert remaining_seconds("", 1000.0, 1600.0) is None
    assert remaining_seconds("1:00:00", None, 1600.0) is None  # not started


@pytest.mark.parametrize(
    ("ratio", "remaining", "restart", "redo", "evict"),
    [
        (2.0, 3600.0, 120.0, 60.0, True),  # loses 1800 s; a restart costs 180 s
        (1.3, 600.0, 120.0, 60.0, False),  # loses 138 s: less than a restart
        (2.0, 300.0, 120.0, 60.0, False),  # too little time left to win it back
        (2.0, None, 120.0, 0.0, False),  # no time limit: never on a guess
        (2.0, 3600.0, None, 0.0, False),  # no restart measured: never on a guess
    ],
)
def test_evict_when_the_straggler_costs_more_than_a_restart(
    ratio: float, remaining: float | None, restart: float | None, redo: float, evict: bool
) -> None:
    assert bool(worth_evicting(ratio, remaining, restart, redo)) == evict


async def slow_node2(live: Live, time_limit: str, measured: bool, spare: bool = False) -> str:  # noqa: F811
    """A job whose node2 runs 2x slower than node1, with (or without) a measured restart behind it."""
    live.daemon.detector._evict = True
    job_id, record, token = await (spare_job(live, time_limit) if spare else live.submit(time_limit=time_limit))
    if measured:
        rec = await live.daemon.store.jobs.get_by_record(record)
        assert rec is not None
        await live.daemon.store.jobs.record_restart(rec, restart(1000.0, 1060.0))
    for step in range(25):
        await live.beat(job_id, record, token, 0, step=step, step_seconds=0.1)
        await live.beat(job_id, record, token, 1, step=step, step_seconds=0.2)
        await live.daemon.detector.check_once()
    return job_id


async def test_a_straggler_costing_more_than_a_restart_is_left_out(live: Live) -> None:  # noqa: F811
    job_id = await slow_node2(live, "2:00:00", measured=True)
    assert live.slurm.calls["requeue"] >= 1 and live.slurm.calls["drain_node"] == 0
    rec = await live.daemon.store.jobs.get_by_job_id(job_id)
    assert rec is not None and "node2" in rec.excluded_nodes
    last = rec.restarts[-1]
    assert last.cause == Cause.STRAGGLER and last.failed_nodes == ("node2",) and last.detected_by == "straggler"
    assert last.detail.startswith("node node2 ran 2.00x the other nodes' step time: left out (it would cost ")
    assert next(n for n in live.slurm.nodes if n.name == "node2").state.usable  # left out, not taken out


@pytest.mark.parametrize(("time_limit", "measured"), [("2:00:00", False), ("", True), ("0:30", True)])
async def test_a_straggler_is_kept_when_eviction_cannot_be_shown_to_pay(
    live: Live,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
    time_limit: str,
    measured: bool,
) -> None:
    caplog.set_level(logging.INFO, "clusterd.supervisor.restarts")
    job_id = await slow_node2(live, time_limit, measured)
    assert live.slurm.calls["requeue"] == 0
    assert "node node2 ran 2.00x the other nodes' step time; kept" in caplog.text
    rec = await live.daemon.store.jobs.get_by_job_id(job_id)
    assert rec is not None and [r.cause for r in rec.restarts] == ([Cause.NODE_FAILURE] if measured else [])


async def test_eviction_is_off_by_default(live: Live) -> None:  # noqa: F811
    assert live.daemon.detector._evict is False


async def test_a_job_with_a_spare_relaunches_in_place_without_its_straggler(live: Live) -> None:  # noqa: F811
    job_id = await slow_node2(live, "2:00:00", measured=True, spare=True)
    assert live.slurm.calls["requeue"] == 0 and live.slurm.calls["set_node_down"] == 0
    assert live.slurm.admin_comments[job_id] == "clusterctl-relaunch=0.1@node1,node3"
    rec = await live.daemon.store.jobs.get_by_job_id(job_id)
    assert rec is not None and rec.restarts[-1].cause == Cause.STRAGGLER
    assert rec.restarts[-1].detail.startswith("in place: spare node3 replaced node2 (node node2 ran 2.00x")


async def test_a_straggler_is_kept_when_the_restart_budget_is_spent(
    live: Live,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Evicting needs a restart: with none left, the slow job runs on rather than being killed."""
    caplog.set_level(logging.INFO, "clusterd.supervisor.restarts")
    live.daemon.detector._evict = True
    job_id, record, token = await live.submit(time_limit="2:00:00", max_restarts=1)
    rec = await live.daemon.store.jobs.get_by_record(record)
    assert rec is not None
    await live.daemon.store.jobs.record_restart(rec, restart(1000.0, 1060.0))  # the one restart, spent
    for step in range(25):
        await live.beat(job_id, record, token, 0, step=step, step_seconds=0.1)
        await live.beat(job_id, record, token, 1, step=step, step_seconds=0.2)
        await live.daemon.detector.check_once()
    assert live.slurm.calls["requeue"] == 0 and live.slurm.calls["kill_steps"] == 0
    assert live.slurm.jobs[job_id].state == JobState.RUNNING
    assert (
        "left out (it would cost" in caplog.text and "; kept (" in caplog.text and "restart budget spent" in caplog.text
    )
