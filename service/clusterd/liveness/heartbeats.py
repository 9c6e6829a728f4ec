"""Taking heartbeats: authenticate with the job's token, check the claim, record it, say when to beat next.

Called by the JobService servicer for every beat of every rank, so the path is kept to memory
lookups: a record's digest and settings are read from the store once and cached while it lives.

A beat is a claim, never a command. The token proves which record it comes from; everything else
is checked against the record and Slurm's view: the job is the record's (or one of its array's
tasks), it runs now, the node is in its allocation, the run is the one Slurm shows, the rank is
below the CPU count of its nodes. Beats outside that are not recorded. Each record's beats are
rate-limited; store reads for ids not cached are shared by a job's ranks and capped service-wide;
an ended record's token is forgotten with it.

A beat may also claim that its rank holds for a stop (liveness.stopping): the claim steers only the
ranks of its own run, which are told the step all of them stop at. Slurm may stop showing the run
RUNNING while its ranks still agree (the SIGTERM of a preemption comes with the requeue): the ranks
the run already knows, from their own nodes, still take part then; nothing else of their beats is
recorded, and no new rank joins. A record that ended (a user's cancel) takes no claims.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

from clusterd.config import LivenessConfig
from clusterd.errors import InvalidArgument, PermissionDenied, ResourceExhausted, Unauthenticated, Unavailable
from clusterd.goodput.autopilot import Autopilot
from clusterd.liveness import credentials
from clusterd.liveness.claims import BeatClaim, BeatReply
from clusterd.liveness.detector import JobView
from clusterd.liveness.table import MAX_RANKS, MAX_STACK_CLAIM, Beat, LivenessTable, Run
from clusterd.slurm.types import JobState
from clusterd.store.jobs import JobRecords

log = logging.getLogger(__name__)

_MAX_CACHED = 100_000
_UNKNOWN_FOR_SECONDS = 30.0  # an ended record's id (read from the store) is not looked up again this long
_MAX_UNKNOWN = 10_000
_LOOKUPS_PER_SECOND = 200.0  # store reads for ids not cached yet; beyond, RESOURCE_EXHAUSTED (the rank retries)
_BEATS_PER_RANK_INTERVAL = 3.0  # a rank beats once an interval (plus its last): three is generous
_NOT_RUNNING_INTERVAL = 0.5  # a job Slurm does not show running (yet) is asked to beat again this soon
_MAX_STEP_SECONDS = 86_400.0  # a step time a beat may claim
_HURRY_EVERY_SECONDS = 30.0  # a record's beats hurry the queue poll at most this often
_ADVISE_EVERY_SECONDS = 5.0  # a run's checkpoint interval advice is worked out again this often


# The rate-limit buckets' clock: a test of the limit replaces it, so the limit is checked whatever
# the machine's load.
_bucket_clock: Callable[[], float] = time.monotonic


@dataclass
class _Known:
    sha256: str
    job_id: str
    interval: float
    hang_timeout: float
    allowance: float = float("inf")  # the record's rate-limit bucket, in beats (full at first)
    refilled: float = field(default_factory=lambda: _bucket_clock())
    hurried_at: float = float("-inf")  # when a beat of a job not seen running last hurried the poll


FirstStep = Callable[[Run], Coroutine[Any, Any, None]]
Jobs = Callable[[str], JobView | None]


class HeartbeatService:
    def __init__(
        self,
        store: JobRecords,
        table: LivenessTable,
        config: LivenessConfig,
        first_step: FirstStep,
        *,
        jobs: Jobs,
        hurry: Callable[[], None] = lambda: None,
        leading: Callable[[], bool] = lambda: True,
        autopilot: Autopilot | None = None,
    ) -> None:
        """``jobs``: Slurm's view of a job by id, from the last poll; ``hurry``: poll again soon (a
        job that beats before the poll saw it running); ``leading``: whether this replica
        supervises now; only the leader's detector listens."""
        self._store = store
        self._leading = leading
        self._autopilot = autopilot
        self._table = table
        self._config = config
        self._first_step = first_step
        self._jobs = jobs
        self._hurry = hurry
        self._known: dict[int, _Known] = {}
        self._unknown: OrderedDict[int, float] = OrderedDict()  # record id -> until when it is not looked up
        self._loading: dict[int, asyncio.Future[_Known | None]] = {}
        self._lookups = _LOOKUPS_PER_SECOND
        self._lookups_at = time.monotonic()
        self._first_steps: dict[tuple[int, str], Run] = {}  # per job, its newest run's first step to note
        self._noting: set[asyncio.Task[None]] = set()  # the tasks noting them

    async def beat(self, req: BeatClaim) -> BeatReply:
        """When to beat next, whether the run is being restarted, and where its stop stands.

        Raises:
            Unauthenticated: no live record with that id, or the token is not its token.
            PermissionDenied: the beat names a job that is not the record's, or a node outside its allocation.
            InvalidArgument: a field out of range (a negative ``stopping_step``, a ``stack`` over
                MAX_STACK_CLAIM characters included).
            ResourceExhausted: the record's beats come faster than its ranks beat, or too many unknown ids.
            Unavailable: this replica is a follower (the ranks try the next address).
        """
        if not self._leading():
            raise Unavailable("this clusterd replica is a follower; heartbeats go to the leader")
        if not req.token or req.record_id <= 0:
            raise Unauthenticated(
                "heartbeat needs record_id and token (CLUSTERCTL_RECORD_ID, CLUSTERCTL_HEARTBEAT_TOKEN)"
            )
        known = await self._lookup(req.record_id)
        if known is None or not credentials.matches(req.token, known.sha256):
            # A wrong token for a live record costs no store read (the record is cached) and never
            # blocks that record's real beats.
            raise Unauthenticated("heartbeat token does not match a live record")
        if len(req.node) > 255 or len(req.job_id) > 64:
            raise InvalidArgument("node" if len(req.node) > 255 else "job_id", "longer than Slurm allows")
        if req.rank >= max(req.world_size, 1):
            raise InvalidArgument("rank", f"{req.rank} is not below world_size {req.world_size}")
        if not (math.isfinite(req.step_seconds) and 0 <= req.step_seconds <= _MAX_STEP_SECONDS):
            raise InvalidArgument(
                "step_seconds", f"{req.step_seconds} is not a step time (0 to {_MAX_STEP_SECONDS:g} s)"
            )
        if len(req.stack) > MAX_STACK_CLAIM:  # checked before anything reads (or hashes) it
            raise InvalidArgument("stack", f"{len(req.stack)} characters; at most {MAX_STACK_CLAIM}")
        if req.stopping_step is not None and req.stopping_step < 0:
            raise InvalidArgument("stopping_step", f"{req.stopping_step} is not a step (0 or more)")
        job_id, view = self._job(req.record_id, req.job_id, known)
        running = view is not None and view.state == JobState.RUNNING
        if view is None or not running or req.restart_count != view.restart_count:
            stopping = self._stopping_after_running(req, job_id, known)
            if stopping is not None:
                return stopping
        self._spend(known, _rank_bound(view) if view is not None and running else 1)
        if view is None or not running or req.restart_count != view.restart_count:
            # Not running as far as the last poll knows: just started (the poll catches up), or held,
            # finished, or an older run still draining. Nothing is recorded either way.
            now = time.monotonic()
            if now - known.hurried_at > _HURRY_EVERY_SECONDS and (
                view is None or view.state in (JobState.PENDING, JobState.RUNNING)
            ):
                known.hurried_at = now  # once in a while per record: beats cannot keep the poll hurried
                self._hurry()
            return BeatReply(min(known.interval, _NOT_RUNNING_INTERVAL))
        node = req.node or (view.nodes[0] if len(view.nodes) == 1 else "")
        if node not in view.nodes:
            raise PermissionDenied(f"node {node or '(none)'!r} is not in job {job_id}'s allocation")
        bound = _rank_bound(view)
        if req.world_size > bound:
            raise InvalidArgument(
                "world_size",
                f"{req.world_size}: a job on {len(view.nodes)} node(s) with "
                f"{bound} CPUs in all has at most {bound} ranks (one per CPU)",
            )
        beat = Beat(
            req.record_id,
            job_id,
            view.restart_count,
            req.rank,
            max(req.world_size, 1),
            node,
            req.pid,
            req.step,
            req.committed_step,
            req.restored,
            req.exiting,
            req.exit_code,
            req.save_stall,
            req.saves,
            req.step_seconds,
            req.stack,
            relaunch=req.relaunch,
        )
        run, first = self._table.record(beat, interval=known.interval, hang_timeout=known.hang_timeout)
        if req.exiting:
            log.info(
                "job %s run %d: rank %d/%d on %s exits with status %d",
                beat.job_id,
                beat.restart_count,
                beat.rank,
                beat.world_size,
                beat.node,
                beat.exit_code,
            )
        if first:
            self._note_first_step(run)
        current = (run.restart_count, run.relaunch) == (req.restart_count, req.relaunch)
        if not current or req.rank not in run.ranks:  # an older run's beat, or a rank over the table's cap
            return BeatReply(known.interval, stop=run.decided and current)
        reply = self._stop_reply(run, req, known.interval)
        if run.stacks_asked and not run.ranks[req.rank].stack_sig and not run.decided:
            reply = replace(reply, want_stack=True)  # the run stopped advancing: what is this rank doing?
        return replace(reply, checkpoint_interval=self.advice(run))

    def _note_first_step(self, run: Run) -> None:
        """Note the run's first step on its record in a task of its own: the table marks a first step
        once, and the beat that carries it must lose nothing when its caller gives up. Noting waits
        for the record's lock, which a restart being decided holds for seconds (a relaunched step's
        first beat may come while its old step is still being killed), longer than a beat's deadline.
        One task per job: a newer run's first step waiting replaces an older one's not yet noted
        (the beats' run numbers are the job's claims, and cost no more than one task)."""
        key = (run.record_id, run.job_id)
        waiting = key in self._first_steps
        self._first_steps[key] = run
        if not waiting:
            task = asyncio.create_task(self._note_first_steps(key), name=f"job {run.job_id}'s first step")
            self._noting.add(task)
            task.add_done_callback(self._noting.discard)

    async def _note_first_steps(self, key: tuple[int, str]) -> None:
        try:
            while (run := self._first_steps.get(key)) is not None:
                try:
                    await self._first_step(run)
                except Exception:
                    log.exception("job %s: cannot note its first step", run.job_id)
                if self._first_steps.get(key) is run:  # else a newer run's came meanwhile: noted next
                    del self._first_steps[key]
        finally:  # cancelled (shutdown): nothing of the job's is left waiting without a task
            self._first_steps.pop(key, None)

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for first steps still being noted, then give up on them: shutdown
        closes the store after."""
        if self._noting:
            await asyncio.wait(set(self._noting), timeout=timeout)
        for task in set(self._noting):
            task.cancel()
        if self._noting:
            await asyncio.wait(set(self._noting))

    def advice(self, run: Run) -> float | None:
        """The checkpoint interval the autopilot advises ``run`` (None: no autopilot, or no save yet);
        worked out at most once per _ADVISE_EVERY_SECONDS per run, whatever the last answer was: every
        rank beats every interval, and a run of many ranks must not cost a walk over them per beat."""
        if self._autopilot is None:
            return None
        now = time.monotonic()
        # (and at once when the run's first save makes advice possible: stall_per_save() is O(1))
        if now - run.advised_at >= _ADVISE_EVERY_SECONDS or (run.advice is None and run.stall_per_save() is not None):
            run.advice, run.advised_at = self._autopilot.for_run(run), now
        return run.advice

    def _stopping_after_running(self, req: BeatClaim, job_id: str, known: _Known) -> BeatReply | None:
        """The reply to a rank of a run Slurm no longer shows running, when that rank still takes part
        in the run's stop: a rank the run knows, from the node it beat from, in the same run. None
        otherwise (the beat is then one of a job not running, and nothing of it is taken)."""
        run = self._table.get(req.record_id, job_id)
        if run is None or run.restart_count != req.restart_count or run.decided:
            return None
        known_rank = run.ranks.get(req.rank)
        if known_rank is None or (req.node and req.node != known_rank.node):
            return None
        if req.stopping_step is None and not run.stop.under_way:
            return None
        self._spend(known, max(len(run.ranks), 1))
        # The job's own interval, not the hurried one of a job not running: a holding rank beats twice
        # an interval, which the bucket (three an interval) allows.
        return self._stop_reply(run, req, known.interval)

    @staticmethod
    def _stop_reply(run: Run, req: BeatClaim, interval: float) -> BeatReply:
        """Take the rank's stop claim, if any, and tell it where the run's stop stands."""
        decided = run.stop.step
        if req.stopping_step is not None:
            run.stop.claim(req.rank, req.stopping_step, run.world_size)
        step = run.stop.decide(run.world_size)
        if step is not None and decided is None:
            log.info("job %s run %d: every rank holds for a stop at step %d", run.job_id, run.restart_count, step)
        return BeatReply(interval, stop=run.decided, stopping=run.stop.under_way, stop_step=step)

    def _job(self, record_id: int, claimed: str, known: _Known) -> tuple[str, JobView | None]:
        """The job the beat is about: the record's, or a task of the record's array (its own job id);
        a task Slurm no longer shows is still one when the record has a run of it."""
        if not claimed or claimed == known.job_id:
            return known.job_id, self._jobs(known.job_id)
        view = self._jobs(claimed)
        if view is None and known.job_id and self._table.get(record_id, claimed) is not None:
            return claimed, None
        if view is None or not known.job_id or view.array_job_id != known.job_id:
            raise PermissionDenied(f"job_id {claimed!r} is not this record's job ({known.job_id or 'not submitted'})")
        return claimed, view

    def _spend(self, known: _Known, ranks: int) -> None:
        """One beat from the record's bucket: ``ranks`` beating every interval, three times over, and
        room for at least one whole interval of them (a job not seen running counts as one rank:
        its beats are not recorded anyway)."""
        per_second = ranks * _BEATS_PER_RANK_INTERVAL / max(known.interval, 0.05)
        room = max(per_second * 2, ranks * _BEATS_PER_RANK_INTERVAL)
        now = _bucket_clock()
        known.allowance = min(room, known.allowance + (now - known.refilled) * per_second)
        known.refilled = now
        if known.allowance < 1:
            raise ResourceExhausted(f"job {known.job_id}: heartbeats arrive faster than its ranks beat")
        known.allowance -= 1

    def _remember_unknown(self, record_id: int) -> None:
        self._unknown[record_id] = time.monotonic() + _UNKNOWN_FOR_SECONDS
        self._unknown.move_to_end(record_id)
        while len(self._unknown) > _MAX_UNKNOWN:
            self._unknown.popitem(last=False)

    async def _lookup(self, record_id: int) -> _Known | None:
        if self._table.ended(record_id):
            self._known.pop(record_id, None)
            return None
        known = self._known.get(record_id)
        if known is not None:
            return known
        if self._unknown.get(record_id, 0.0) > time.monotonic():
            return None
        loading = self._loading.get(record_id)
        if loading is None:  # a job's ranks start together: one store read for all of them
            self._take_lookup()
            loading = self._loading[record_id] = asyncio.ensure_future(self._load(record_id))
            loading.add_done_callback(lambda _: self._loading.pop(record_id, None))
        return await asyncio.shield(loading)  # a caller that goes away does not cancel the others' read

    def _take_lookup(self) -> None:
        now = time.monotonic()
        self._lookups = min(_LOOKUPS_PER_SECOND, self._lookups + (now - self._lookups_at) * _LOOKUPS_PER_SECOND)
        self._lookups_at = now
        if self._lookups < 1:
            raise ResourceExhausted("too many heartbeats of jobs not seen yet; retry in a second")
        self._lookups -= 1

    async def _load(self, record_id: int) -> _Known | None:
        rec = await self._store.get_by_record(record_id)
        if rec is not None and rec.terminal:
            self._remember_unknown(record_id)  # an ended record never beats again
        if rec is None or rec.terminal or not rec.heartbeat_token_sha256:
            return None  # not yet submitted (or no such record): asked again next time, within the lookup cap
        known = _Known(
            rec.heartbeat_token_sha256,
            rec.job_id,
            credentials.interval_of(rec.spec, self._config),
            credentials.hang_timeout_of(rec.spec, self._config),
        )
        if len(self._known) >= _MAX_CACHED:
            self._known.pop(next(iter(self._known)))
        self._known[record_id] = known
        return known


def _rank_bound(view: JobView) -> int:
    """At most one rank per CPU of the allocation; the table's own cap when Slurm did not say."""
    return max(view.cpus, len(view.nodes), 1) if view.cpus > 0 else MAX_RANKS
