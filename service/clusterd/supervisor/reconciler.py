"""Diffs Slurm's view (each QueueCache snapshot) against the store and acts on the differences.

For every live record it copies what Slurm shows into the record, publishes what changed, folds in
checkpoint progress from the ProgressReader's in-memory table (never reading storage itself), and
lets the Restarter apply the restart policy. Records that changed nothing since the last look are
skipped without a store read, so a poll's cost follows the jobs that changed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable

from clusterd.ha.leadership import Deposed
from clusterd.liveness.detector import Detection
from clusterd.liveness.table import Run
from clusterd.model.events import EventType
from clusterd.observability.metrics import CHECKPOINT_COMMITS, CHECKPOINT_STEP, JOBS_BY_STATE
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.store.jobs import JobRecords
from clusterd.store.records import JobRecord, Phase
from clusterd.supervisor import array_view
from clusterd.supervisor.cache import ClusterSnapshot
from clusterd.supervisor.events import JobEvent
from clusterd.supervisor.progress import ProgressReader
from clusterd.supervisor.restarts import Restarter, relaunches
from clusterd.supervisor.sink import EventSink

log = logging.getLogger(__name__)

# A live job missing from this many consecutive polls has left Slurm's memory (MinJobAge).
_MISSING_POLLS = 3
_ADOPT_GRACE_SECONDS = 5.0
_CLOCK_SKEW_SECONDS = 30.0  # between slurmctld's clock (submit times) and the service's (record times)
_RECOVERY_HURRY_SECONDS = 3.0  # fast polls after each look at a job being brought back (see QueueCache.hurry)


def job_of(rec: JobRecord, snap: ClusterSnapshot) -> SlurmJob | None:
    """Slurm's job under the record's id, if it is this record's job: its tag and its owner.

    Slurm reuses ids when slurmctld loses its state; a job under the same id that carries another
    tag (or none: a plain sbatch) is someone else's, and this record's job is gone.
    """
    sj = snap.jobs.get(rec.job_id) if rec.job_id else None
    return sj if sj is not None and rec.adopts(sj) else None


def failed_nodes(snap: ClusterSnapshot, run_started: float | None) -> frozenset[str]:
    """Nodes that count as failed for a run that started at ``run_started``: DOWN now, or back
    already but with a slurmd started after the run began (ReturnToService brought a node that
    died back before this poll: its jobs were lost all the same)."""
    if not run_started:
        return snap.down_nodes
    return snap.down_nodes | {n.name for n in snap.nodes if n.slurmd_started > run_started}


def observe(rec: JobRecord, sj: SlurmJob) -> bool:
    """Copy what Slurm says into the record; True when anything a client can see changed."""
    before = (rec.state, rec.reason, rec.nodes, rec.exit_code, rec.restart_count, rec.start_time, rec.end_time)
    rec.name = sj.name or rec.name
    rec.state = sj.state
    rec.reason = sj.reason
    if not _run_shrinking(rec, sj):
        rec.nodes = sj.nodes if sj.nodes or sj.state != JobState.PENDING else ()
    rec.partition = sj.partition or rec.partition
    rec.exit_code = sj.exit_code
    rec.exit_signal = sj.exit_signal
    rec.submit_time = sj.submit_time or rec.submit_time
    rec.start_time = sj.start_time
    # Run 0's start only: a job first seen after a requeue started its run 0 before this one.
    if rec.first_start is None and sj.start_time and sj.state != JobState.PENDING and sj.restart_count == 0:
        rec.first_start = sj.start_time
    rec.end_time = sj.end_time if sj.state.terminal else None  # Slurm reports the projected end
    rec.restart_count = max(rec.restart_count, sj.restart_count)
    if sj.excluded_nodes:
        rec.excluded_nodes = sj.excluded_nodes
    after = (rec.state, rec.reason, rec.nodes, rec.exit_code, rec.restart_count, rec.start_time, rec.end_time)
    return before != after


def _run_shrinking(rec: JobRecord, sj: SlurmJob) -> bool:
    """Whether Slurm shows fewer nodes only because the same run is ending.

    When a node dies, Slurm drops it from the job's node list while the survivors clean up
    (COMPLETING), before it requeues the job. The record keeps the run's whole allocation, so the
    restart decision can still name the dead node (and count the nodes it ran on).
    """
    return (
        (sj.state == JobState.COMPLETING or sj.restart_count == rec.restart_count)
        and bool(sj.nodes)
        and rec.state in (JobState.RUNNING, JobState.COMPLETING)
        and set(sj.nodes) < set(rec.nodes)
    )


def _quiet(rec: JobRecord, sj: SlurmJob) -> bool:
    """Whether a poll may skip this record until Slurm's view, the record or its progress changes.

    Not when time alone calls for action: a held requeue is re-released, a restart Slurm made on
    its own (or a decided requeue it has not shown yet) is still to be handled.
    """
    if rec.phase is not Phase.SUBMITTED or sj.state.terminal or rec.needs_release:
        return False
    return sj.restart_count <= rec.acked_restarts


def _submitted_since(job: SlurmJob, rec: JobRecord) -> bool:
    """Whether ``job`` can be the submission ``rec`` reserved: not submitted before the reservation.

    Record ids (and so comment tags) start again in a new store, while Slurm keeps an older store's
    jobs: a job older than the record is another store's, never this crashed submission.
    """
    return not job.submit_time or job.submit_time >= rec.created - _CLOCK_SKEW_SECONDS


# What a skipped record looked like: Slurm's view, the store's stamp, the progress table's step.
_Seen = tuple[SlurmJob, float, int | None]


class Reconciler:
    """Subscribed to the QueueCache; the only writer of what Slurm shows into the store."""

    def __init__(
        self,
        store: JobRecords,
        events: EventSink,
        restarter: Restarter,
        progress: ProgressReader,
        *,
        kick: Callable[[], None],
        hurry: Callable[[float], None] | None = None,
        want_whole: Callable[[], None] | None = None,
        may_act: Callable[[], bool] = lambda: True,
    ) -> None:
        """``may_act``: whether this replica supervises now (it holds the lease); a follower's
        reconciler looks at nothing and forgets what it knew, so a leadership it gains later starts
        from the store and Slurm, not from a stale memory."""
        self._store = store
        self._events = events
        self._restarter = restarter
        self._progress = progress
        self._kick = kick
        self._hurry = hurry or (lambda seconds: kick())
        self._want_whole = want_whole or kick
        self._snapshot: ClusterSnapshot | None = None
        self._missing: dict[str, int] = {}
        # Records whose last look changed nothing and that need no periodic action, as they were
        # seen: a poll skips them while all three stay the same.
        self._settled: dict[int, _Seen] = {}
        self._may_act = may_act
        self._standing_by = False

    def _acting(self) -> bool:
        if self._may_act():
            self._standing_by = False
            return True
        if not self._standing_by:
            self._standing_by = True
            self._missing.clear()
            self._settled.clear()
            self._restarter.reset()
        return False

    async def on_detected(self, det: Detection) -> None:
        """A failure the liveness detector found: the restarter acts on it under the record's lock."""
        if not self._acting():
            return
        async with self._store.record_lock(det.record_id):
            rec = await self._store.get_by_record(det.record_id)
            if rec is None or rec.terminal or self._snapshot is None:
                return
            outcome = await self._restarter.on_detected(rec, det, job_of(rec, self._snapshot))
        if outcome.kick:
            self._hurry(_RECOVERY_HURRY_SECONDS)

    async def on_first_step(self, run: Run) -> None:
        """A run reported its first training step: run 0's goes on the record (goodput's start
        phase), a restarted run's is the last phase of its recovery."""
        if run.first_step_wall is None or not self._acting():
            return
        async with self._store.record_lock(run.record_id):
            # A restart being decided may have held the lock for seconds: the leadership may be gone.
            rec = await self._store.get_by_record(run.record_id)
            if rec is None or rec.terminal or rec.acked_restarts != run.restart_count or not self._acting():
                return
            restarted = run.restart_count > 0 or run.relaunch > 0
            if restarted and run.relaunch != relaunches(rec):  # not the newest restart's run
                return
            if run.relaunch > 0:  # an in-place restart's, relaunched when it was decided
                await self._restarter.amend_phase(rec, "running", run.began_wall)  # the new step's first beat
            if restarted:
                await self._restarter.amend_phase(rec, "first_step", run.first_step_wall)
            elif rec.first_step_time is None and not rec.array:
                rec.first_step_time = run.first_step_wall
                await self._store.save(rec)

    async def focus(self) -> frozenset[str]:
        """The Slurm ids of the records followed: what a partial queue poll must always cover."""
        return frozenset(row.job_id for row in await self._store.live() if row.job_id)

    async def on_snapshot(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = snapshot
        if not self._acting():
            return
        try:
            await self._reconcile(snapshot)
        except Deposed as exc:  # the lease lapsed mid-poll: the new leader redoes what was left
            log.warning("stopped supervising mid-poll: %s", exc)

    async def _reconcile(self, snapshot: ClusterSnapshot) -> None:
        states: Counter[str] = Counter()
        settled: dict[int, _Seen] = {}
        for row in await self._store.live():
            sj = snapshot.jobs.get(row.job_id) if row.job_id else None  # settled only if it was adopted
            if sj is not None and sj.in_array:
                sj = None  # an array: its tasks change under one id, so it is never skipped
            if sj is not None:
                seen = (sj, row.updated, self._progress.reading(row.record_id).step)
                if self._settled.get(row.record_id) == seen:
                    settled[row.record_id] = seen  # nothing new in Slurm, the store or the progress table
                    states[sj.state.value] += 1
                    continue
            lock = self._store.record_lock(row.record_id)
            if lock.locked():  # an RPC holds it across sbatch/scancel/scontrol: look again next poll
                states[(sj.state if sj is not None else JobState.PENDING).value] += 1
                continue  # never waited for: one slow command must not stall the poll for everyone
            async with lock:
                rec = await self._store.get_by_record(row.record_id)  # fresh: an RPC may have changed it
                if rec is not None and not rec.terminal:
                    await self._reconcile_one(rec, snapshot)
                if rec is not None and not rec.terminal and rec.phase is not Phase.FAILED:
                    states[rec.state.value] += 1
                    if sj is not None and rec.adopts(sj) and _quiet(rec, sj):
                        settled[row.record_id] = (sj, row.updated, self._progress.reading(row.record_id).step)
        self._settled = settled
        for state in JobState:  # every state, so a state that emptied reads 0 rather than its last value
            JOBS_BY_STATE.labels(state=state.value).set(states[state.value])

    async def _reconcile_one(self, rec: JobRecord, snap: ClusterSnapshot) -> None:
        if rec.phase is Phase.SUBMITTING:
            await self._adopt_or_fail(rec, snap)
            return
        if rec.array:
            await self._reconcile_array(rec, snap)
            return
        sj = job_of(rec, snap)
        if sj is None:
            await self._handle_missing(rec)
            return
        self._missing.pop(rec.job_id, None)
        previous, before_nodes, run_started = rec.state, rec.nodes, rec.start_time
        if observe(rec, sj):
            await self._store.save(rec)
            self._events.publish(JobEvent(EventType.STATE_CHANGED, rec, previous_state=previous))
        if rec.spec.checkpoint_uri:
            await self._fold_progress(rec, sj)
        outcome = await self._restarter.on_observed(rec, before_nodes, sj, failed_nodes(snap, run_started))
        if outcome.finish is not None:
            await self.finish(rec, outcome.finish)
        if outcome.kick or rec.needs_release:
            self._hurry(_RECOVERY_HURRY_SECONDS)

    async def _reconcile_array(self, rec: JobRecord, snap: ClusterSnapshot) -> None:
        """One array job: per-task state from its elements, per-task restarts, the array's end."""
        elements = tuple(j for j in snap.arrays.get(rec.job_id, ()) if rec.adopts(j))  # a reused id: not ours
        if not elements:
            if array_view.finished(rec):
                await self.finish(rec, array_view.end_reason(rec))
            else:
                await self._handle_missing(rec)
            return
        self._missing.pop(rec.job_id, None)
        previous = rec.state
        if array_view.observe_array(rec, elements):
            await self._store.save(rec)
            self._events.publish(JobEvent(EventType.STATE_CHANGED, rec, previous_state=previous))
        if await self._restarter.on_array_observed(rec, elements, snap.down_nodes):
            self._kick()
        if array_view.finished(rec):
            rec.final_cause = array_view.final_cause(rec)
            await self.finish(rec, array_view.end_reason(rec))

    async def _fold_progress(self, rec: JobRecord, sj: SlurmJob) -> None:
        """Follow a running job's checkpoints; publish a newer step the reader has seen."""
        if sj.state == JobState.RUNNING:
            self._progress.follow(rec.record_id, rec.spec.checkpoint_uri, user=rec.user)
        step = self._progress.reading(rec.record_id).step
        if step is not None and step > rec.checkpoint_step:
            CHECKPOINT_COMMITS.labels(job_id=rec.job_id).inc()
            CHECKPOINT_STEP.labels(job_id=rec.job_id).set(step)
            rec.checkpoint_step = step
            await self._store.save(rec)
            self._events.publish(JobEvent(EventType.CHECKPOINT, rec, message=f"checkpoint step {step} committed"))

    async def finish(self, rec: JobRecord, reason: str) -> None:
        """Mark a record terminal: supervision of it ends here."""
        self._missing.pop(rec.job_id, None)
        # The last run's save stall is only in the beats, which end here: goodput keeps it.
        rec.final_save_stall = self._restarter.run_notes(rec).get("save_stall", rec.final_save_stall)
        self._restarter.forget(rec)
        self._progress.forget(rec.record_id)
        # A finished job's series goes too: job ids would otherwise grow /metrics without bound.
        for family in (CHECKPOINT_COMMITS, CHECKPOINT_STEP):
            with contextlib.suppress(KeyError):
                family.remove(rec.job_id)
        rec.terminal = True
        # A job that left Slurm's queue unseen has no end time: when clusterd let it go stands for it
        # (its goodput's wall time ends there).
        rec.end_time = rec.end_time or time.time()
        rec.final_reason = reason
        await self._store.save(rec)
        self._events.publish(JobEvent(EventType.FINISHED, rec, message=reason))

    async def _handle_missing(self, rec: JobRecord) -> None:
        count = self._missing.get(rec.job_id, 0) + 1
        self._missing[rec.job_id] = count
        if count < _MISSING_POLLS:
            return
        self._missing.pop(rec.job_id, None)
        previous = rec.state
        if not rec.state.terminal:
            rec.state = JobState.UNKNOWN
        self._events.publish(JobEvent(EventType.STATE_CHANGED, rec, previous_state=previous))
        await self.finish(rec, "job left Slurm's queue")

    async def _adopt_or_fail(self, rec: JobRecord, snap: ClusterSnapshot) -> None:
        """A submission that was in flight when the service stopped: find it in Slurm by its tag."""
        if time.time() - rec.created < _ADOPT_GRACE_SECONDS:
            return  # reserved an instant ago: its handler may not hold the record lock yet
        match = next((j for j in snap.jobs.values() if rec.adopts(j) and _submitted_since(j, rec)), None)
        if match is None and not snap.whole:
            self._want_whole()  # a partial poll may not list it: only a whole one can tell it is not there
            return
        if match is not None:
            rec.job_id = match.array_job_id or match.job_id  # any task of an array names the array
            rec.phase = Phase.SUBMITTED
            rec.array = rec.spec.array
            if rec.array:
                array_view.observe_array(rec, snap.arrays.get(rec.job_id, ()))
            else:
                observe(rec, match)
            log.info("re-adopted job %s for record %s", match.job_id, rec.record_id)
            await self._store.save(rec)
            self._events.publish(JobEvent(EventType.SUBMITTED, rec))
        else:
            rec.phase = Phase.FAILED
            rec.error = "the service stopped before Slurm accepted the job; nothing was submitted"
            await self._store.save(rec)
