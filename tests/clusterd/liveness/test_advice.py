"""The autopilot's advice to beating ranks costs O(1) per beat, whatever the number of ranks."""

from __future__ import annotations

from typing import Any, cast

from clusterd.config import GoodputConfig, LivenessConfig
from clusterd.goodput.autopilot import Autopilot, FailureHistory
from clusterd.goodput.report import GoodputReporter
from clusterd.liveness.heartbeats import HeartbeatService
from clusterd.liveness.table import Beat, LivenessTable, Run
from clusterd.model.spec import JobSpec
from clusterd.store.records import JobRecord, Phase

CFG = GoodputConfig()


class CountingAutopilot(Autopilot):
    def __init__(self) -> None:
        super().__init__(FailureHistory(CFG), CFG)
        self.calls = 0

    def for_run(self, run: Run) -> float | None:
        self.calls += 1
        return super().for_run(run)


async def _first_step(run: Run) -> None:
    return None


def _service(table: LivenessTable, pilot: Autopilot) -> HeartbeatService:
    return HeartbeatService(
        cast(Any, None), table, LivenessConfig(), _first_step, jobs=lambda _job: None, autopilot=pilot
    )


def _beat(rank: int, *, stall: float = 0.0, saves: int = 0) -> Beat:
    return Beat(7, "100", 0, rank, 4096, f"n{rank % 8}", 1000 + rank, 5, -1, False, False, 0, stall, saves)


def test_a_run_that_never_saved_is_advised_once_per_period_not_once_per_beat() -> None:
    table, pilot = LivenessTable(), CountingAutopilot()
    service = _service(table, pilot)
    for rank in range(2000):  # a beat round of a job with many ranks, none of which saved yet
        run, _ = table.record(_beat(rank), interval=10.0, hang_timeout=60.0)
        assert service.advice(run) is None
    assert pilot.calls == 1
    run, _ = table.record(_beat(0, stall=0.0, saves=1), interval=10.0, hang_timeout=60.0)
    assert service.advice(run) is not None  # the first save makes advice possible: given at once
    for rank in range(2000):
        run, _ = table.record(_beat(rank, stall=0.0, saves=1), interval=10.0, hang_timeout=60.0)
        service.advice(run)
    assert pilot.calls == 2


def test_the_slowest_savers_stall_per_save_is_kept_by_each_beat() -> None:
    table = LivenessTable()
    run, _ = table.record(_beat(0, stall=4.0, saves=2), interval=10.0, hang_timeout=1e9)
    table.record(_beat(1, stall=1.0, saves=1), interval=10.0, hang_timeout=1e9)
    run.started -= 100.0  # the run is old enough for the claims to stand as they are
    table.record(_beat(0, stall=4.0, saves=2), interval=10.0, hang_timeout=1e9)
    table.record(_beat(1, stall=1.0, saves=1), interval=10.0, hang_timeout=1e9)
    assert run.stall_per_save() == 2.0
    assert run.save_stall() == 4.0


def test_a_report_reuses_the_advice_the_beats_got() -> None:
    table, pilot = LivenessTable(), CountingAutopilot()
    run, _ = table.record(_beat(0, stall=1.0, saves=1), interval=10.0, hang_timeout=1e9)
    run.advice = 123.0
    rec = JobRecord(7, "alice", "r", JobSpec(), Phase.SUBMITTED, created=0.0, job_id="100")
    report = GoodputReporter(table, pilot).report(rec, now=10.0)
    assert report.checkpoint_interval == 123.0
    assert pilot.calls == 0
