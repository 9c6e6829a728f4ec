"""What the restarter notes of a run that ended, for goodput: no second counting of a save's stall."""

from __future__ import annotations

from typing import Any, cast

import pytest

from clusterd.config import RestartDefaults
from clusterd.liveness.table import Beat, LivenessTable
from clusterd.model.spec import JobSpec
from clusterd.store.records import JobRecord, Phase
from clusterd.supervisor.restarts import Restarter


def beat(step: int, committed: int, stall: float = 0.0, saves: int = 0) -> Beat:
    return Beat(7, "100", 0, 0, 1, "n1", 1000, step, committed, False, False, 0, stall, saves)


def test_the_lost_work_begins_after_the_stall_of_the_save_that_committed() -> None:
    table = LivenessTable()
    run, _ = table.record(beat(10, 5), interval=1.0, hang_timeout=1e9)  # restored from step 5
    run.started -= 100.0  # old enough for the stall claims to stand as they are
    table.record(beat(20, 5), interval=1.0, hang_timeout=1e9)
    reached = run.steps_seen[-1][1]  # step 20 first reported
    table.record(beat(20, 20, stall=3.0, saves=1), interval=1.0, hang_timeout=1e9)  # saved it: 3 s blocked
    rec = JobRecord(7, "alice", "r", JobSpec(), Phase.SUBMITTED, created=0.0, job_id="100")
    none = cast(Any, None)
    notes = Restarter(none, none, none, none, RestartDefaults(), table).run_notes(rec)
    # The 3 s are checkpoint stall: the steps after 20 (the ones a failure loses) began after them.
    assert notes == {"save_stall": 3.0, "committed": pytest.approx(reached + 3.0)}
