"""The latest heartbeat of every rank of every supervised run, in memory (lost on restart, by design).

A run is one start of a job: Slurm's restart count tells runs apart, so beats from a previous run
still draining cannot keep a new run alive, and the decision about a run is taken once. The tasks
of an array (one record, a job id each) have runs of their own.
"""

from __future__ import annotations

import bisect
import hashlib
import time
from collections import deque
from dataclasses import dataclass, field

from clusterd.liveness.stopping import StopAgreement

MAX_RANKS = 65_536  # one job's ranks the table keeps: a bound on what one job's beats can cost
_MAX_STEPS_SEEN = 4096  # a run's (step, first seen) samples kept: the oldest go first
_MAX_ENDED = 100_000  # finished records remembered (the store says the same of older ones)
_GAP_AVERAGING = 0.2  # weight of the newest gap between a rank's advances in their running average


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
    save_stall: float = 0.0  # seconds this rank's save() calls blocked in this run (a clamped claim)
    saves: int = 0  # how many saves that took
    step_seconds: float = 0.0  # the rank's word: its recent seconds per step
    advanced: float = 0.0  # time.monotonic() when its step last moved forward (0: no step yet)
    advances: int = 0  # how often clusterd saw its step move forward in this run
    advance_gap: float = 0.0  # clusterd's running average of the seconds between those advances
    first_step: int = -1  # the first step it reported in this run
    stack: str = ""  # its stacks, once asked for (the run stopped advancing); the first ranks' only
    stack_sig: str = ""  # what its main thread was doing, to compare with its peers ("": not sent)


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
    stacks_asked: float = 0.0  # monotonic time the ranks were asked for their stacks (0: not asked)
    stacks_kept: int = 0  # ranks whose stack text is kept
    stragglers: dict[str, float] = field(default_factory=dict)  # node -> its ranks' step time over the others'
    eviction_asked: set[str] = field(default_factory=set)  # stragglers whose eviction was weighed (once each)
    started: float = field(default_factory=time.monotonic)  # the run's first beat (bounds stall claims)
    # The committed step the run started from (its restore), and when each newer step was first
    # reported (ascending, bounded): if the run fails, the work after its newest committed step was
    # taken is lost (the commit itself may land after the failure: the step was saved before it).
    committed_base: int | None = None
    steps_seen: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=_MAX_STEPS_SEEN))
    advice: float | None = None  # the checkpoint interval last advised to the run, and when (monotonic)
    advised_at: float = float("-inf")
    # Kept up to date by each beat (O(1), whatever the number of ranks): the largest stall any rank
    # claimed, and the (stall, saves) of the rank that stalled most over the saves it made.
    stall_max: float = 0.0
    slowest_saver: tuple[float, int] = (0.0, 0)

    def committed_step(self) -> int:
        return max((b.committed_step for b in self.ranks.values()), default=-1)

    def committed_at(self) -> float | None:
        """When the run first reported reaching its newest committed step; None when the run committed
        nothing newer than what it started from (all of its steps are lost if it fails)."""
        step = self.committed_step()
        if self.committed_base is None or step <= self.committed_base or not self.steps_seen:
            return None
        seen = self.steps_seen
        i = bisect.bisect_left(seen, step, key=lambda s: s[0])
        if i >= len(seen):
            return seen[-1][1]
        if i == 0 or seen[i][0] == step:
            return seen[i][1]
        # Between two beats: steps come at a steady pace, so the time is interpolated.
        (s0, t0), (s1, t1) = seen[i - 1], seen[i]
        return t0 + (step - s0) / (s1 - s0) * (t1 - t0)

    def save_stall(self) -> float:
        """Seconds the run stalled in save(): the slowest rank's (synchronous training waits for it)."""
        return self.stall_max

    def stall_per_save(self) -> float | None:
        """The mean stall per save of the rank that stalled most; None before any save."""
        stall, saves = self.slowest_saver
        return stall / saves if saves > 0 else None


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
    save_stall: float = 0.0
    saves: int = 0
    step_seconds: float = 0.0
    stack: str = ""
    relaunch: int = 0  # in-place relaunches of the run (--spare-nodes): a relaunch is a run of its own


MAX_STACK = 8192  # characters of one rank's stacks kept (the client sends at most as many)
MAX_STACK_CLAIM = 16_384  # a beat carrying a longer stack is refused (INVALID_ARGUMENT)
MAX_STACKS_KEPT = 256  # ranks of one run whose stack text is kept (the others', its signature only)


def printable(text: str) -> str:
    """``text`` without control characters (but newlines and tabs): a stack is the job's word, and
    is shown in terminals (`clusterctl status`) where escape sequences would act."""
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)


def stack_signature(stack: str) -> str:
    """The frames of the first thread of a stack dump (the main thread, as the client sends it):
    ranks of one job run the same code, so ranks whose main threads wait at the same lines agree."""
    first = stack.split("\n\n", 1)[0]
    frames = [line.strip() for line in first.splitlines() if line.lstrip().startswith("File ")]
    return hashlib.sha256("\n".join(frames).encode()).hexdigest()[:16] if frames else "-"


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
        old = run.ranks.get(beat.rank)
        # A stall claim can never exceed the run's age: the rank says it, clusterd bounds it.
        stall = min(max(0.0, beat.save_stall), now - run.started)
        saves = max(0, beat.saves)
        if old is not None and old.pid == beat.pid:  # the same process's counts only grow
            stall, saves = max(stall, old.save_stall), max(saves, old.saves)
        fresh = RankBeat(
            beat.node,
            beat.pid,
            now,
            wall,
            beat.step,
            beat.committed_step,
            beat.restored,
            beat.exiting,
            beat.exit_code,
            stall,
            saves,
        )
        fresh.step_seconds = beat.step_seconds if beat.step_seconds > 0 else (old.step_seconds if old else 0.0)
        if old is None or old.step < 0:
            fresh.first_step, fresh.advanced = beat.step, (now if beat.step >= 0 else 0.0)
        else:
            fresh.first_step = old.first_step
            fresh.advanced, fresh.advances, fresh.advance_gap = old.advanced, old.advances, old.advance_gap
            if beat.step > old.step:  # the pace as clusterd sees it, whatever the rank says of its steps
                gap = now - old.advanced
                fresh.advance_gap = (
                    gap if not old.advances else old.advance_gap + _GAP_AVERAGING * (gap - old.advance_gap)
                )
                fresh.advanced, fresh.advances = now, old.advances + 1
        if old is not None and old.stack_sig:
            fresh.stack, fresh.stack_sig = old.stack, old.stack_sig
        elif beat.stack and run.stacks_asked:  # taken only when asked: the text costs memory
            kept = beat.stack[:MAX_STACK]  # the kept part alone is read (and hashed)
            fresh.stack_sig = stack_signature(kept)
            if run.stacks_kept < MAX_STACKS_KEPT:
                run.stacks_kept += 1
                fresh.stack = printable(kept)
        run.ranks[beat.rank] = fresh
        run.stall_max = max(run.stall_max, stall)
        if saves > 0 and stall >= run.slowest_saver[0]:
            run.slowest_saver = (stall, saves)
        if run.committed_base is None:
            run.committed_base = beat.committed_step
        if beat.step >= 0 and (not run.steps_seen or beat.step > run.steps_seen[-1][0]):
            run.steps_seen.append((beat.step, wall))
        first = beat.step >= 0 and run.first_step_wall is None
        if first:
            run.first_step_wall = wall
        return run, first

    def runs(self) -> list[Run]:
        return list(self._runs.values())

    def get(self, record_id: int, job_id: str) -> Run | None:
        """The newest run of ``job_id`` (the record's job, or a task of its array) under the record."""
        return self._runs.get((record_id, job_id))

    def stragglers(self, record_id: int) -> dict[str, float]:
        """The straggler nodes the record's running jobs (its array's tasks too) name now."""
        found: dict[str, float] = {}
        for (rid, _), run in self._runs.items():
            if rid == record_id and not run.decided:
                for node, ratio in run.stragglers.items():
                    found[node] = max(ratio, found.get(node, 0.0))
        return found

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
