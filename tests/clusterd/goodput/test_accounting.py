"""The split of a job's wall time: parts add up, each part from its own phases, claims bounded."""

from __future__ import annotations

import math

import pytest

from clusterd.goodput.accounting import PARTS, LiveRun, account
from clusterd.model.causes import Cause
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState
from clusterd.store.records import JobRecord, Phase, RestartEntry


def record(**fields: object) -> JobRecord:
    rec = JobRecord(1, "alice", "r", JobSpec(), Phase.SUBMITTED, created=1000.0, job_id="7")
    for name, value in fields.items():
        setattr(rec, name, value)
    return rec


def restart(**phases: float) -> RestartEntry:
    return RestartEntry(Cause.NODE_FAILURE, ("n2",), phases.get("detected", 0.0), 4, phases=phases)


def adds_up(g: object) -> None:
    assert set(g.breakdown) == set(PARTS)  # type: ignore[attr-defined]
    assert math.isclose(sum(g.breakdown.values()), g.wall_seconds, abs_tol=1e-9)  # type: ignore[attr-defined]
    assert all(v >= 0 for v in g.breakdown.values())  # type: ignore[attr-defined]


def test_a_job_that_lost_a_node_once() -> None:
    # submitted 1000, ran 1010 (first step 1015), committed 1050, node died 1070, decided 1073,
    # running again 1080, first step 1084, finished 1200; 5 s of save stall per run.
    rec = record(
        state=JobState.COMPLETED,
        terminal=True,
        first_start=1010.0,
        first_step_time=1015.0,
        start_time=1080.0,
        end_time=1200.0,
        final_save_stall=3.0,
        restarts=[
            restart(committed=1050.0, save_stall=5.0, failed=1070.0, detected=1073.0, running=1080.0, first_step=1084.0)
        ],
    )
    g = account(rec, now=5000.0)
    adds_up(g)
    b = g.breakdown
    assert g.wall_seconds == 200.0
    assert b["queue"] == 10.0 and b["start_restore"] == 5.0 + 4.0
    assert b["lost"] == 20.0 and b["detection"] == 3.0 and b["restart"] == 7.0
    assert b["checkpoint_stall"] == 5.0 + 3.0  # run 0's from its restart, the last run's kept at the end
    assert b["productive"] == 200.0 - 10 - 9 - 20 - 3 - 7 - 8
    assert 0 < g.ettr < 1


def test_a_run_that_never_committed_loses_all_its_steps() -> None:
    notes = restart(failed=1070.0, detected=1071.0, save_stall=0.0)  # the beats were seen: nothing committed
    rec = record(first_start=1010.0, first_step_time=1015.0, restarts=[notes])
    g = account(rec, now=1100.0)
    adds_up(g)
    assert g.breakdown["lost"] == 55.0
    assert g.breakdown["restart"] == 29.0  # requeued, not running yet


def test_a_run_whose_notes_were_lost_loses_nothing_known() -> None:
    # clusterd restarted during the run: its beats (and so the notes of its commits) were not seen.
    rec = record(first_start=1010.0, first_step_time=1015.0, restarts=[restart(failed=1070.0, detected=1071.0)])
    g = account(rec, now=1100.0)
    adds_up(g)
    assert g.breakdown["lost"] == 0.0 and g.breakdown["productive"] == 55.0


def test_a_job_still_pending_has_only_queue_time() -> None:
    g = account(record(), now=1030.0)
    adds_up(g)
    assert g.breakdown["queue"] == 30.0 and g.ettr == 0.0


def test_the_running_run_takes_the_beats_first_step_and_stall() -> None:
    rec = record(state=JobState.RUNNING, start_time=1010.0)
    g = account(rec, now=1110.0, live=LiveRun(first_step=1020.0, save_stall=8.0))
    adds_up(g)
    assert g.breakdown["start_restore"] == 10.0 and g.breakdown["checkpoint_stall"] == 8.0
    assert g.breakdown["productive"] == 82.0


@pytest.mark.parametrize("stall", [1e12, float("inf"), -5.0, float("nan")])
def test_a_stall_claim_never_pushes_another_part_out(stall: float) -> None:
    rec = record(state=JobState.RUNNING, start_time=1010.0)
    g = account(rec, now=1110.0, live=LiveRun(first_step=1020.0, save_stall=stall))
    adds_up(g)
    assert g.breakdown["queue"] == 10.0 and g.breakdown["start_restore"] == 10.0
    assert g.breakdown["checkpoint_stall"] in (0.0, 90.0)


def test_phases_out_of_order_or_outside_the_job_are_clipped() -> None:
    # A clock step: the failure "before" the start, detection before the failure, a first step in the future.
    rec = record(
        first_start=1010.0,
        first_step_time=9999.0,
        restarts=[restart(failed=900.0, detected=800.0, running=700.0, committed=5.0)],
        start_time=1020.0,
    )
    g = account(rec, now=1100.0)
    adds_up(g)
    assert g.wall_seconds == 100.0


def test_restarts_without_phases_count_from_the_restart_time() -> None:
    entry = RestartEntry(Cause.NODE_FAILURE, (), 1050.0, -1)  # Slurm's own requeue, seen late
    rec = record(state=JobState.RUNNING, first_start=1010.0, start_time=1060.0, restarts=[entry])
    g = account(rec, now=1100.0)
    adds_up(g)
    assert g.breakdown["restart"] == 10.0 and g.breakdown["lost"] == 0.0  # no beats: lost work unknown


def test_a_second_restart_before_the_next_run_started_counts_as_restart_time() -> None:
    first = restart(committed=1040.0, failed=1050.0, detected=1052.0)  # its run never seen running
    second = RestartEntry(Cause.NODE_FAILURE, (), 1070.0, 4, phases={"failed": 1069.0, "detected": 1070.0})
    rec = record(first_start=1010.0, first_step_time=1015.0, restarts=[first, second])
    g = account(rec, now=1100.0)
    adds_up(g)
    assert g.breakdown["detection"] == 2.0 and g.breakdown["restart"] == 48.0 and g.breakdown["lost"] == 10.0


def test_a_pending_jobs_estimated_start_is_not_a_start() -> None:
    # Slurm shows an estimate of when a pending job starts: the wait until then is queue, not work.
    rec = record(state=JobState.PENDING, start_time=1010.0)
    g = account(rec, now=1100.0)
    adds_up(g)
    assert g.breakdown["queue"] == pytest.approx(100.0) and g.breakdown["productive"] == 0.0


def test_a_requeued_pending_jobs_estimate_does_not_start_its_next_run() -> None:
    rec = record(
        state=JobState.PENDING,
        first_start=1010.0,
        start_time=1090.0,  # the estimate of the requeued job's start
        restarts=[restart(failed=1050.0, detected=1055.0)],
    )
    g = account(rec, now=1100.0)
    adds_up(g)
    assert g.breakdown["restart"] == pytest.approx(45.0)  # from the decision to now: not running yet


def test_a_finished_record_with_no_end_time_stops_growing() -> None:
    # The job left Slurm's queue unseen: no end time. Its wall time is what the record knows.
    rec = record(state=JobState.UNKNOWN, terminal=True, first_start=1010.0, start_time=1010.0, end_time=None)
    first, later = account(rec, now=2000.0), account(rec, now=9000.0)
    assert first == later and first.wall_seconds == pytest.approx(10.0)
