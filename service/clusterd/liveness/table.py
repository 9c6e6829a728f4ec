"""The latest heartbeat of every rank of every supervised run, in memory (lost on restart, by design).

A run is one start of a job: Slurm's restart count tells runs apart, so beats from a previous run
still draining cannot keep a new run alive, and the decision about a run is taken once. The tasks
of an array (one record, a job id each) have runs of their own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from clusterd.liveness.stopping import StopAgreement

MAX_RANKS = 65_536  # one job's ranks the table keeps: a bound on what one job's beats can cost
_MAX_ENDED = 100_000  # finished records remembered (the store says the same of older ones)


@dataclass
class RankBeat:
    node: str
    pid: int
    seen: float  # time.monotonic() of the newest beat
    seen_wall: float  # time.time() of the same beat (restart records are wall-clock)
    step: int = -1
    committed_step: int = -1
    restored: bool = False
    exiting: bool = False
    exit_code: int = 0


@dataclass
class Run:
    """The beats of one run of one job, and what was already concluded from them."""

    record_id: int
    job_id: str
    restart_count: int
    interval: float
    hang_timeout: float
    relaunch: int = 0  # which in-place relaunch of the Slurm run (--spare-nodes) this is
    world_size: int = 1
    ranks: dict[int, RankBeat] = field(default_factory=dict)
    began_wall: float = field(default_factory=time.time)  # its first beat
    first_step_wall: float | None = None  # first beat of this run that carried a training step
    decided: bool = False  # a failure was acted on: later silence of this run is its consequence
    gone_since: float = 0.0  # monotonic time since which Slurm has not shown the job live (0: it does)
    stop: StopAgreement = field(default_factory=StopAgreement)  # the step the ranks stop at, for a stop signal

    def committed_step(self) -> int:
        return max((b.committed_step for b in self.ranks.values()), default=-1)


@dataclass(frozen=True)
class Beat:
    """One heartbeat as the service took it (already authenticated)."""

    record_id: int
    job_id: str
    restart_count: int
    rank: int
    world_size: int
    node: str
    pid: int
    step: int
    committed_step: int
    restored: bool
    exiting: bool
    exit_code: int
    relaunch: int = 0  # in-place relaunches of the run (--spare-nodes): a relaunch is a run of its own


class LivenessTable:
    def __init__(self) -> None:
        self._runs: dict[tuple[int, str], Run] = {}  # (record id, job id) -> that job's newest run
        self._ended: dict[int, None] = {}  # records whose supervision ended (oldest first, bounded)

    def record(self, beat: Beat, *, interval: float, hang_timeout: float) -> tuple[Run, bool]:
        """Take one beat; returns its run and whether this beat is the run's first training step.

        A beat from an older run than the one known is dropped (its run was already replaced).
        """
        key = (beat.record_id, beat.job_id)
        run = self._runs.get(key)
        which = (beat.restart_count, beat.relaunch)
        if run is not None and which < (run.restart_count, run.relaunch):
            return run, False
        if run is None or which > (run.restart_count, run.relaunch):
            run = self._runs[key] = Run(
                beat.record_id, beat.job_id, beat.restart_count, interval, hang_timeout, beat.relaunch
            )
        run.interval, run.hang_timeout = interval, hang_timeout
        run.world_size = max(run.world_size, beat.world_size)
        if beat.rank not in run.ranks and len(run.ranks) >= MAX_RANKS:
            return run, False
        now, wall = time.monotonic(), time.time()
        run.ranks[beat.rank] = RankBeat(
            beat.node, beat.pid, now, wall, beat.step, beat.committed_step, beat.restored, beat.exiting, beat.exit_code
        )
        first = beat.step >= 0 and run.first_step_wall is None
        if first:
            run.first_step_wall = wall
        return run, first

    def runs(self) -> list[Run]:
        return list(self._runs.values())

    def get(self, record_id: int, job_id: str) -> Run | None:
        """The newest run of ``job_id`` (the record's job, or a task of its array) under the record."""
        return self._runs.get((record_id, job_id))

    def clear(self) -> None:
        """Forget every run: this replica stopped (or started) supervising; beats start it anew."""
        self._runs.clear()

    def forget(self, run: Run) -> None:
        if self._runs.get((run.record_id, run.job_id)) is run:
            del self._runs[(run.record_id, run.job_id)]

    def end(self, record_id: int) -> None:
        """The record is finished: its runs are dropped and its beats are refused from now on."""
        for key in [k for k in self._runs if k[0] == record_id]:
            del self._runs[key]
        self._ended[record_id] = None
        while len(self._ended) > _MAX_ENDED:
            del self._ended[next(iter(self._ended))]

    def ended(self, record_id: int) -> bool:
        return record_id in self._ended
