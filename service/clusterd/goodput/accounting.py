"""A job's wall time split into what it was spent on; the parts add up to the wall time.

The timeline comes from the record: the original submission, when run 0 started and took its first
step, and for every restart the phases the supervisor noted (failed, detected, running, first_step,
and ``committed``: when the work after its newest checkpoint began). The run in progress
adds what the liveness table knows of it. Every interval is clipped into [submitted, end] and in
order, so a skewed or missing time shrinks a part instead of double counting; what is not
known to be something else is productive (a failed run whose beats' notes are missing, as after a
clusterd restart, lost nothing known). Save stalls are the ranks' claims: they are clipped to the
run's productive time, never allowed to push another part out.
"""

from __future__ import annotations

from dataclasses import dataclass

from clusterd.slurm.types import JobState
from clusterd.store.records import JobRecord

# The parts, in the order they are reported (productive last: it is what remains).
PARTS = ("queue", "start_restore", "checkpoint_stall", "detection", "restart", "lost", "productive")


def ettr(breakdown: dict[str, float], wall_seconds: float) -> float:
    """Effective training time ratio: productive seconds over wall seconds (0 for no wall time)."""
    return breakdown["productive"] / wall_seconds if wall_seconds > 0 else 0.0


@dataclass(frozen=True)
class LiveRun:
    """What the heartbeats tell of the run in progress (None fields: not known)."""

    first_step: float | None = None  # wall clock of its first training step
    save_stall: float = 0.0  # seconds its ranks stalled in save() so far (clamped claims)


@dataclass(frozen=True)
class Goodput:
    wall_seconds: float
    breakdown: dict[str, float]  # every name of PARTS; the values add up to wall_seconds

    @property
    def ettr(self) -> float:
        return ettr(self.breakdown, self.wall_seconds)


@dataclass(frozen=True)
class _Run:
    """One run: started at ``start``, ended at ``end`` (inf: still running), failed or not."""

    start: float
    end: float
    first_step: float | None
    committed: float | None  # when the work after its newest checkpoint began (later work is lost)
    noted: bool  # the beats' notes of the run were kept (else its lost work is unknown: productive)
    stall: float
    failed: bool
    detected: float | None  # when the failure BEFORE this run was decided (None for run 0)


def account(rec: JobRecord, now: float, live: LiveRun | None = None) -> Goodput:
    """Split ``rec``'s wall time (submission to its end, or ``now`` while it lives)."""
    t0 = rec.created
    end = max(t0, _end(rec, now))

    def at(t: float | None, lo: float) -> float:
        return min(end, max(lo, t if t is not None else lo))

    parts = dict.fromkeys(PARTS, 0.0)
    runs, pending = _runs(rec, live)
    cursor = t0
    failed_before = False
    for run in runs:
        if failed_before:
            detected = at(run.detected, cursor)
            parts["detection"] += detected - cursor
            cursor = detected
        start = at(run.start, cursor)
        parts["restart" if failed_before else "queue"] += start - cursor
        stop = at(run.end, start)
        first = min(stop, at(run.first_step, start))
        parts["start_restore"] += first - start
        lost = 0.0
        if run.failed and run.first_step is not None and run.noted:
            lost = stop - min(stop, at(run.committed, first))
        parts["lost"] += lost
        parts["checkpoint_stall"] += min(max(0.0, run.stall), stop - first - lost)
        cursor, failed_before = stop, run.failed
    # After the last known point: a restart under way (requeued, not running yet), or the first wait.
    if failed_before:
        detected = at(pending, cursor)
        parts["detection"] += detected - cursor
        cursor = detected
    parts["restart" if failed_before else "queue"] += end - cursor
    wall = end - t0
    parts["productive"] = max(0.0, wall - sum(v for k, v in parts.items() if k != "productive"))
    return Goodput(wall, parts)


_TIMES = ("failed", "detected", "running", "first_step", "committed")  # the phases that are times


def _end(rec: JobRecord, now: float) -> float:
    """Where the wall time ends: ``now`` while the record lives; once it is finished, its end time, or
    (a job that left Slurm's queue unseen) the last time the record knows, never ``now``: a finished
    job's wall time must not grow."""
    if not rec.terminal:
        return now
    if rec.end_time:
        return rec.end_time
    known = [rec.created, rec.start_time or 0.0, rec.first_start or 0.0, rec.first_step_time or 0.0]
    for entry in rec.restarts:
        known.append(entry.time)
        known.extend(entry.phases[k] for k in _TIMES if k in entry.phases)
    return min(now, max(known))


def _slurm_start(rec: JobRecord) -> float | None:
    """Slurm's start time of the record's job, when it is one: a pending job's is an estimate."""
    return rec.start_time if rec.start_time and rec.state != JobState.PENDING else None


def _runs(rec: JobRecord, live: LiveRun | None) -> tuple[list[_Run], float | None]:
    """The runs of the job in order, each with what is known of its phases, and when the failure that
    ended the last of them was decided when no run followed it (None otherwise).

    A restart whose next run was never seen running ends the list: the time after it is the restart's.
    """
    runs: list[_Run] = []
    start = rec.first_start if rec.first_start is not None else (None if rec.restarts else _slurm_start(rec))
    first_step = rec.first_step_time
    detected: float | None = None
    for entry in rec.restarts:
        ph = entry.phases
        if start is None:
            return runs, detected
        stall = ph.get("save_stall", 0.0)
        noted = "save_stall" in ph or "committed" in ph  # none: no beats seen (clusterd restarted, or none sent)
        failed = ph.get("failed", entry.time)
        runs.append(_Run(start, failed, first_step, ph.get("committed"), noted, stall, True, detected))
        detected = ph.get("detected", entry.time)
        start, first_step = ph.get("running"), ph.get("first_step")
    slurm_start = _slurm_start(rec)
    if start is None and rec.restarts and slurm_start and detected is not None and slurm_start >= detected:
        start = slurm_start  # the last run started, and the note of when was not written (yet)
    if start is None:
        return runs, detected
    if first_step is None and live is not None:
        first_step = live.first_step
    stall = live.save_stall if live is not None else rec.final_save_stall
    runs.append(_Run(start, float("inf"), first_step, None, live is not None, stall, False, detected))
    return runs, None
