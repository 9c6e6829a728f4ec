"""A job's goodput as the API shows it: the record's accounting plus what the beats of its run in
progress say (first step, save stalls) and the interval the autopilot advises that run."""

from __future__ import annotations

import time
from dataclasses import dataclass

from clusterd.goodput.accounting import Goodput, LiveRun, account
from clusterd.goodput.autopilot import Autopilot
from clusterd.liveness.table import LivenessTable, Run
from clusterd.store.records import JobRecord


@dataclass(frozen=True)
class GoodputReport:
    goodput: Goodput
    checkpoint_interval: float | None  # the autopilot's advice to the run in progress, if any


class GoodputReporter:
    def __init__(self, table: LivenessTable | None, autopilot: Autopilot | None) -> None:
        self._table = table
        self._autopilot = autopilot

    def _run(self, rec: JobRecord) -> Run | None:
        run = self._table.get(rec.record_id, rec.job_id) if self._table is not None and rec.job_id else None
        if run is not None and (run.restart_count != rec.acked_restarts or rec.terminal):
            return None  # an older run's beats, or a job that ended: the record says it all
        return run

    def goodput(self, rec: JobRecord, *, now: float | None = None) -> Goodput:
        """The accounting alone (O(1) per record: no advice)."""
        run = self._run(rec)
        live = LiveRun(run.first_step_wall, run.save_stall()) if run is not None else None
        return account(rec, time.time() if now is None else now, live)

    def report(self, rec: JobRecord, *, now: float | None = None) -> GoodputReport:
        run = self._run(rec)
        # The advice the beats were last given (worked out at most every few seconds there): a report
        # must not walk a run's ranks again.
        advice = run.advice if run is not None and self._autopilot is not None else None
        return GoodputReport(self.goodput(rec, now=now), advice)
