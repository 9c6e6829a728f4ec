"""Acting on the restart policy: requeue, release, or stop a job whose run ended.

Requeues keep the Slurm job id (``scontrol requeue``), exclude the nodes that failed, and clear the
~120 s BeginTime hold Slurm puts on requeued jobs. ``JobRecord.acked_restarts`` (persisted before
acting) makes every decision happen once, also across a service restart in the middle of one.
The reconciler calls :meth:`Restarter.on_observed` for every live job it sees and carries out the
returned :class:`Outcome` (finishing the record, polling again soon).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass, replace

from clusterd.config import RestartDefaults
from clusterd.errors import SlurmError, SlurmUnavailable
from clusterd.goodput.autopilot import FailureHistory
from clusterd.goodput.failures import failure_of
from clusterd.jobs.script import RELAUNCH_NOTE
from clusterd.liveness.detector import Detection, crash_detail, crashed_rank
from clusterd.liveness.eviction import measured_restart_seconds, remaining_seconds, worth_evicting
from clusterd.liveness.table import LivenessTable
from clusterd.model.causes import Cause
from clusterd.model.events import EventType
from clusterd.observability.metrics import REQUEUES
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.store.jobs import JobRecords
from clusterd.store.records import JobRecord, RestartEntry
from clusterd.supervisor.events import JobEvent
from clusterd.supervisor.policy import (
    Decision,
    Policy,
    Termination,
    classify,
    decide,
    effective_policy,
    resumed,
)
from clusterd.supervisor.progress import ProgressReader
from clusterd.supervisor.sink import EventSink

log = logging.getLogger(__name__)

_REISSUE_AFTER_SECONDS = 15.0  # a decided requeue that Slurm has not shown by then is sent again
_RELEASE_EVERY_SECONDS = 1.0  # how often a held (BeginTime) requeued job is released again
# A requeued job launched within the same second its previous run's credential was revoked is
# killed by slurmd ("Job credential revoked"): start the next run a few seconds after the decision.
_MIN_RESTART_DELAY_SECONDS = 3.0
# ... which is only a bound while the run's end has not been seen: once Slurm holds the requeued
# job (PENDING, BeginTime), the credential was revoked before that look, and a start in the next
# second is safe.
_CREDENTIAL_GAP_SECONDS = 1.2
_EXCLUDE_FOR_SECONDS = 600.0  # a node that failed a job is kept out of its restarts this long
# How long a decision waits for a progress read that began after the run ended (a job often
# commits its last checkpoint just before it exits); past this it decides on what is known.
_PROGRESS_WAIT_SECONDS = 10.0
# After a detected rank failure the job's steps are killed; then the requeue is retried this long
# while Slurm is still ending the run (a requeue refused as "in transition").
_REQUEUE_RETRY_SECONDS = 5.0
_REQUEUE_RETRY_GAP = 0.2


@dataclass(frozen=True)
class Outcome:
    """What the reconciler must do after a look at one job."""

    finish: str | None = None  # end supervision with this final reason
    kick: bool = False  # poll again soon (a requeue was just sent)


_NOTHING = Outcome()


class Restarter:
    def __init__(
        self,
        backend: SlurmBackend,
        store: JobRecords,
        events: EventSink,
        progress: ProgressReader,
        defaults: RestartDefaults,
        liveness: LivenessTable | None = None,
        *,
        failures: FailureHistory | None = None,
    ) -> None:
        """``failures``: where node failures are noted for the checkpoint autopilot's MTBF."""
        self._failures = failures
        self._backend = backend
        self._liveness = liveness
        self._store = store
        self._events = events
        self._progress = progress
        self._defaults = defaults
        self._released_at: dict[str, float] = {}
        self._held_since: dict[str, float] = {}  # job -> when Slurm was first seen holding its requeue
        self._ended_at: dict[int, float] = {}  # record -> when its run's end was first seen
        self._ending: dict[int, Termination] = {}  # record -> how its run ended, as first seen

    async def on_observed(
        self, rec: JobRecord, before_nodes: tuple[str, ...], sj: SlurmJob, down: frozenset[str]
    ) -> Outcome:
        """Apply the policy to one observation of a live job; ``rec`` is held under its record lock."""
        if rec.needs_release:
            await self._keep_released(rec, sj)
        if sj.state == JobState.RUNNING and sj.nodes and sj.restart_count == rec.acked_restarts:
            await self._note_resumed(rec, sj)
        if sj.state.terminal and sj.restart_count < rec.acked_restarts:
            if sj.state == JobState.CANCELLED or rec.user_cancelled:
                return self._cancelled_while_restarting(rec, sj)
            return await self._reissue_requeue(rec)
        term = classify(rec, before_nodes, sj, down)
        if term is None:
            return _NOTHING
        term = self._first_look(rec, self._what_the_ranks_said(rec, sj, term))
        step = self._settled_step(rec, term)
        if step is None:
            return _NOTHING  # look again next poll, once the progress read has caught up
        self._ending.pop(rec.record_id, None)
        rec.checkpoint_step = step
        policy = effective_policy(rec.spec.restart_policy, self._defaults)
        decision = decide(term, policy, rec, step)
        if decision.requeue:
            await self._restart(rec, sj, term, policy, decision, step)
            return Outcome(kick=True)
        return await self._stop(rec, term, decision)

    async def on_array_observed(self, rec: JobRecord, elements: tuple[SlurmJob, ...], down: frozenset[str]) -> bool:
        """The policy per task: a task that ended badly is requeued alone (``scontrol requeue A_T``).

        Each task has its own budget: the restarts recorded for it (``task T: ...`` entries) and
        its own requeue count, compared with Slurm's restart count of the task's job so that a
        decision is made once. Returns whether a requeue was sent (poll again soon).
        """
        kicked = False
        policy = effective_policy(rec.spec.restart_policy, self._defaults)
        for sj in elements:
            if sj.array_task_id is None or sj.array_task_id not in rec.array_tasks:
                continue
            task = rec.array_tasks[sj.array_task_id]
            key = sj.display_id
            if sj.state == JobState.PENDING and sj.reason == "BeginTime" and sj.restart_count:
                # Requeued (by us, a user or Slurm): Slurm holds it ~120 s on BeginTime; start it now.
                if time.monotonic() - self._released_at.get(key, 0.0) >= _RELEASE_EVERY_SECONDS:
                    self._released_at[key] = time.monotonic()
                    mine = [r.time for r in rec.restarts if r.detail.startswith(f"task {sj.array_task_id}: ")]
                    wait = max(policy.backoff_seconds, _MIN_RESTART_DELAY_SECONDS)
                    remaining = max(0, math.ceil((mine[-1] if mine else 0.0) + wait - time.time()))
                    with contextlib.suppress(SlurmError):
                        await self._backend.update_job(key, start_after=remaining)
                continue
            if not sj.state.terminal or sj.restart_count < task.restart_count:
                continue  # still running, or our requeue has not shown up in Slurm yet
            prefix = f"task {sj.array_task_id}: "
            view = replace(
                rec,
                user_cancelled=rec.user_cancelled or task.cancelled,
                acked_restarts=task.restart_count,
                restarts=[r for r in rec.restarts if r.detail.startswith(prefix)],
            )
            term = classify(view, task.nodes, sj, down)
            if term is None or term.cause in (Cause.COMPLETED, Cause.CANCELLED):
                continue
            decision = decide(term, policy, view, rec.checkpoint_step)
            if not decision.requeue:
                continue
            entry = RestartEntry(
                term.cause,
                term.failed_nodes,
                time.time(),
                rec.checkpoint_step,
                term.exit_code,
                prefix + decision.reason,
            )
            task.restart_count += 1
            task.state = JobState.PENDING
            rec.restart_count = sum(t.restarts for t in rec.array_tasks.values())
            await self._record(rec, entry)  # the decision persists before it is acted on
            REQUEUES.labels(cause=term.cause.value).inc()
            log.info("job %s: task restart %d (%s)", key, task.restart_count, decision.reason)
            try:
                await self._backend.requeue(key)
            except SlurmError as exc:
                log.warning("job %s: scontrol requeue failed (%s)", key, exc)
            self._events.publish(JobEvent(EventType.RESTARTED, rec, message=entry.detail))
            kicked = True
        return kicked

    async def on_detected(self, rec: JobRecord, det: Detection, sj: SlurmJob | None) -> Outcome:
        """Act on a failure the liveness detector found in the run Slurm still shows RUNNING.

        A dead node is marked DOWN with the reason (Slurm stops and requeues its jobs at once, and
        gives it no new ones), or DRAINed when another user's job runs there (this job's steps are
        then killed and it is requeued here); a hung or crashed rank's steps are killed and the
        job requeued. The
        restart is recorded first, with how it was detected and when, so the reconciler sees an
        expected requeue (never a second restart for the same failure) and releases it unheld.
        """
        if rec.terminal or rec.user_cancelled or sj is None or sj.state != JobState.RUNNING:
            return _NOTHING
        if sj.restart_count != det.restart_count or sj.restart_count != rec.acked_restarts:
            return _NOTHING  # another run by now, or a restart already under way
        cause = det.cause
        node_dead = cause == Cause.NODE_FAILURE
        straggler = cause == Cause.STRAGGLER
        if straggler:
            why = self._eviction_pays(rec, det, sj)
            if not why:
                return _NOTHING
            det = replace(det, detail=f"{det.detail}: left out ({why})")
        left_out = node_dead or straggler
        term = Termination(cause, det.nodes if left_out else (), det.exit_code, det.detail, nodes=rec.nodes)
        policy = effective_policy(rec.spec.restart_policy, self._defaults)
        # The ranks' own reports are newer than the last storage read: the step the job resumes from.
        rec.checkpoint_step = max(rec.checkpoint_step, det.committed_step)
        decision = decide(term, policy, rec, rec.checkpoint_step)
        if straggler and not decision.requeue:  # a slow job is never stopped: only a restart leaves it out
            log.info("job %s: %s; kept (%s)", rec.job_id, det.detail, decision.reason)
            return _NOTHING
        # DOWN makes Slurm requeue the node's jobs; a drained node's jobs (this one too) keep running,
        # and so does a --no-kill job (spare nodes) unless the node that runs its batch script died.
        batch_lost = node_dead and bool(sj.batch_host) and sj.batch_host in det.nodes
        no_kill = rec.spec.spare_nodes > 0
        slurm_requeues = node_dead and not set(det.nodes) <= set(det.drain) and (not no_kill or batch_lost)
        if no_kill and left_out and decision.requeue and det.relaunch == relaunches(rec):
            step_nodes = None if batch_lost else in_place_nodes(rec, det, sj)
            why = f"the batch host {sj.batch_host} died" if batch_lost else "no spare node left"
            if step_nodes is not None:
                why = await self._relaunch(rec, det, sj, step_nodes)
                if not why:
                    return Outcome(kick=True)
            decision = replace(decision, reason=f"{decision.reason}; requeued: {why}")
        if node_dead:
            # Whatever the policy says of this job, the nodes are dead: Slurm must stop using them.
            for node in det.nodes:
                await self.node_out(node, det.detail, drain=node in det.drain)
        if not decision.requeue:
            if not slurm_requeues:
                with contextlib.suppress(SlurmError):
                    await self._backend.kill_steps(rec.job_id)  # not left running with a dead rank
            return Outcome(kick=True)  # the reconciler classifies the end and stops the job
        entry = RestartEntry(
            cause,
            term.failed_nodes,
            det.detected_at,
            rec.checkpoint_step,
            det.exit_code,
            decision.reason,
            nodes_before=len(rec.nodes),
            detected_by=det.detected_by,
            phases={**self.run_notes(rec), "failed": det.failed_at, "detected": det.detected_at},
        )
        rec.acked_restarts = sj.restart_count + 1
        rec.excluded_nodes = still_excluded(rec, det.detected_at)
        if straggler or (policy.exclude_failed_nodes and node_dead):
            rec.excluded_nodes = tuple(sorted(set(rec.excluded_nodes) | set(det.nodes)))
        rec.terminal = False
        rec.needs_release = True
        rec.backoff_seconds = policy.backoff_seconds
        await self._record(rec, entry)
        self._decided(rec, det)
        REQUEUES.labels(cause=cause.value).inc()
        log.info(
            "job %s: restart %d (%s, detected by %s)", rec.job_id, len(rec.restarts), decision.reason, det.detected_by
        )
        if not slurm_requeues:
            await self._kill_and_requeue(rec.job_id)
        await self.amend_phase(rec, "requeued", time.time())
        await self._release(rec, exclude=rec.excluded_nodes or None)
        self._events.publish(JobEvent(EventType.RESTARTED, rec, message=decision.reason))
        return Outcome(kick=True)

    async def _relaunch(self, rec: JobRecord, det: Detection, sj: SlurmJob, step_nodes: tuple[str, ...]) -> str:
        """A restart in place (--spare-nodes): same job, same Slurm run, a new step on ``step_nodes``.

        The job's batch script learns where from the job's AdminComment (which only an
        administrator can write), set first: Slurm refuses job updates for a while once a DOWN node
        resized the job. The script's ``srun`` reads it when its step has ended, which happens only
        after the decision is recorded here, the dead nodes are DOWN (Slurm takes them out of the
        --no-kill job) and the step is killed. Returns "" when relaunched, else why not (the job
        is then requeued).
        """
        note = f"{RELAUNCH_NOTE}{sj.restart_count}.{relaunches(rec) + 1}@{','.join(step_nodes)}"
        try:
            await self._backend.set_admin_comment(rec.job_id, note)
        except SlurmError as exc:
            log.warning("job %s: cannot tell the job where to relaunch (%s); requeueing it", rec.job_id, exc)
            return f"Slurm refused the relaunch note ({exc})"[:200]
        gone = [n for n in det.nodes if n in det.rank_nodes]
        spares = [n for n in step_nodes if n not in det.rank_nodes]
        what = ", ".join(f"spare {s} replaced {d}" for s, d in zip(spares, gone, strict=False)) or "relaunched"
        entry = RestartEntry(
            det.cause,
            det.nodes,
            det.detected_at,
            rec.checkpoint_step,
            det.exit_code,
            f"in place: {what} ({det.detail})",
            nodes_before=len(det.rank_nodes),
            nodes_after=len(step_nodes),
            detected_by=det.detected_by,
            # Relaunched: from now the job's script starts the next step as soon as the old one ends,
            # whether clusterd's kill below or Slurm (its node DOWN) ends it.
            phases={"failed": det.failed_at, "detected": det.detected_at, "relaunched": time.time()},
        )
        rec.excluded_nodes = tuple(sorted(set(still_excluded(rec, det.detected_at)) | set(det.nodes)))
        await self._record(rec, entry)
        self._decided(rec, det)
        REQUEUES.labels(cause=det.cause.value).inc()
        log.info("job %s: restart %d in place on %s (%s)", rec.job_id, len(rec.restarts), ",".join(step_nodes), what)
        steps: tuple[str, ...] | None = None  # listed before the nodes go down: Slurm may trim the steps' lists
        try:
            steps = await self._backend.steps_on(rec.job_id, det.nodes)
        except SlurmError as exc:
            log.warning("job %s: cannot list its steps (%s); killing all of them", rec.job_id, exc)
        if det.cause == Cause.NODE_FAILURE:  # a straggler is left out of the step, not taken out of service
            for node in det.nodes:
                await self.node_out(node, det.detail, drain=node in det.drain)
        with contextlib.suppress(SlurmError):  # the old step ends (the script's srun starts the next); the
            await self._backend.kill_steps(rec.job_id, steps)  # survivors' other steps run on
        self._events.publish(JobEvent(EventType.RESTARTED, rec, message=entry.detail))
        return ""

    def _eviction_pays(self, rec: JobRecord, det: Detection, sj: SlurmJob) -> str:
        """Why leaving the straggler out pays ("": it does not, or that cannot be known)."""
        remaining = remaining_seconds(rec.spec.time_limit, sj.start_time, time.time())
        why = worth_evicting(det.ratio, remaining, measured_restart_seconds(rec.restarts), det.redo)
        if not why:
            log.info(
                "job %s: %s; kept (over %s left, a restart measured %s)",
                rec.job_id,
                det.detail,
                "unknown time" if remaining is None else f"{remaining:.0f}s",
                "never" if measured_restart_seconds(rec.restarts) is None else "as costing more",
            )
        return why

    def _decided(self, rec: JobRecord, det: Detection) -> None:
        """The run the detection concerns is over: the detector judges none of its later silence."""
        run = self._liveness.get(rec.record_id, rec.job_id) if self._liveness is not None else None
        if run is not None and run.restart_count == det.restart_count:
            run.decided = True

    async def _record(self, rec: JobRecord, entry: RestartEntry) -> None:
        """Persist a restart, then note the node failure it records (as the store will say on a
        restore: goodput/failures.py reads back exactly these)."""
        await self._store.record_restart(rec, entry)
        failure = failure_of(entry)
        if self._failures is not None and failure is not None:
            self._failures.note(failure.nodes, failure.when)

    def run_notes(self, rec: JobRecord) -> dict[str, float]:
        """What the beats said of the run that ended, for goodput: when the work after its newest
        committed step began (the steps after it are lost), and how long its ranks stalled in save().

        That work began when the step was first reported plus the stall of the save that committed
        it: the stall is counted as checkpoint stall already, never also as lost work.
        """
        run = self._liveness.get(rec.record_id, rec.job_id) if self._liveness is not None else None
        if run is None or run.restart_count != rec.acked_restarts:
            return {}
        notes = {"save_stall": run.save_stall()}
        committed = run.committed_at()
        if committed is not None:
            notes["committed"] = committed + (run.stall_per_save() or 0.0)
        return notes

    async def amend_phase(self, rec: JobRecord, phase: str, when: float) -> None:
        """Note when the newest restart reached ``phase`` (once: the first time counts)."""
        if rec.restarts and phase not in rec.restarts[-1].phases:
            last = rec.restarts[-1]
            await self._store.amend_last_restart(rec, replace(last, phases={**last.phases, phase: when}))

    async def node_out(self, node: str, why: str, *, drain: bool) -> bool:
        """DOWN, or DRAIN where another user's job runs: their jobs are left to Slurm's own verdict.
        Also how liveness.health's verdicts drain a failing node (the one fenced path to Slurm).
        Whether Slurm took it; a deposed replica's Deposed propagates (it did nothing)."""
        reason = f"clusterd: {why}"[:200]
        try:
            await (self._backend.drain_node if drain else self._backend.set_node_down)(node, reason)
        except SlurmError as exc:
            log.warning(
                "cannot mark node %s %s (%s); Slurm will after SlurmdTimeout", node, "drained" if drain else "down", exc
            )
            return False
        return True

    async def _kill_and_requeue(self, job_id: str) -> None:
        """Kill the steps (srun collects their exits at once), then requeue, retried while Slurm ends the run."""
        with contextlib.suppress(SlurmError):
            await self._backend.kill_steps(job_id)
        deadline = time.monotonic() + _REQUEUE_RETRY_SECONDS
        while True:
            try:
                await self._backend.requeue(job_id)
                return
            except SlurmError as exc:
                if time.monotonic() >= deadline:
                    log.warning("job %s: scontrol requeue failed (%s); will retry", job_id, exc)
                    return
            await asyncio.sleep(_REQUEUE_RETRY_GAP)

    def reset(self) -> None:
        """Forget every timer: this replica stopped supervising (another one leads now)."""
        self._released_at.clear()
        self._held_since.clear()
        self._ended_at.clear()
        self._ending.clear()

    def forget(self, rec: JobRecord) -> None:
        for key in [k for k in self._released_at if k == rec.job_id or k.startswith(f"{rec.job_id}_")]:
            del self._released_at[key]
        self._held_since.pop(rec.job_id, None)
        self._ended_at.pop(rec.record_id, None)
        self._ending.pop(rec.record_id, None)
        if self._liveness is not None:
            self._liveness.end(rec.record_id)  # its token is refused from now on

    def _what_the_ranks_said(self, rec: JobRecord, sj: SlurmJob, term: Termination) -> Termination:
        """A run that failed with an exit code is a rank failure when a rank's last heartbeat said so.

        srun ends the whole step when one rank fails: the job's exit code is then that rank's or
        a peer's (killed, or its collective timed out), and the job would be stopped as a plain
        failure. The rank's own exit report says what happened, and the policy treats it as such.
        """
        if term.cause != Cause.EXIT_CODE or self._liveness is None:
            return term
        run = self._liveness.get(rec.record_id, sj.job_id)
        if run is None or run.restart_count != sj.restart_count:
            return term
        failed = crashed_rank(run)
        if failed is None:
            return term
        rank, beat = failed
        return replace(
            term,
            cause=Cause.RANK_FAILED,
            exit_code=beat.exit_code,
            detail=crash_detail(rank, beat),
            detected_by="rank-exit",
        )

    def _first_look(self, rec: JobRecord, term: Termination) -> Termination:
        """How the run ended as first seen: while the decision waits for a progress read, Slurm
        moves on (the dead node leaves the job's list, the job turns PENDING). A later look only
        adds the dead nodes when the first did not see them down yet."""
        first = self._ending.setdefault(rec.record_id, term)
        if term.failed_nodes and not first.failed_nodes:
            first = self._ending[rec.record_id] = replace(term, nodes=first.nodes or term.nodes)
        return first

    def _settled_step(self, rec: JobRecord, term: Termination) -> int | None:
        """The step to decide with, or None while a fresh progress read is still worth waiting for."""
        final = rec.user_cancelled or term.cause in (Cause.COMPLETED, Cause.CANCELLED, Cause.OUT_OF_MEMORY)
        if not rec.spec.checkpoint_uri or final:  # the step cannot change the decision
            return rec.checkpoint_step
        run = self._liveness.get(rec.record_id, rec.job_id) if self._liveness is not None else None
        if run is not None and run.restart_count == rec.acked_restarts and run.committed_step() >= 0:
            # The ranks reported their newest commit in their heartbeats: no storage read to wait for.
            self._ended_at.pop(rec.record_id, None)
            return max(run.committed_step(), rec.checkpoint_step)
        now = time.time()
        ended = self._ended_at.setdefault(rec.record_id, now)
        reading = self._progress.reading(rec.record_id)
        if reading.read_at < ended and not reading.error and now - ended < _PROGRESS_WAIT_SECONDS:
            self._progress.follow(rec.record_id, rec.spec.checkpoint_uri, user=rec.user)
            self._progress.refresh(rec.record_id)
            return None
        self._ended_at.pop(rec.record_id, None)
        if reading.step is None:
            return rec.checkpoint_step
        return max(reading.step, rec.checkpoint_step)

    async def _note_resumed(self, rec: JobRecord, sj: SlurmJob) -> None:
        """Record on the newest restart how many nodes the run after it got (once)."""
        if rec.restarts and not rec.restarts[-1].nodes_after:
            entry = resumed(rec.restarts[-1], len(sj.nodes))
            # Seen RUNNING by this poll, but running no later than its first step if that beat came first.
            running = min(time.time(), entry.phases.get("first_step", float("inf")))
            entry = replace(entry, phases={"running": running, **entry.phases})
            await self._store.amend_last_restart(rec, entry)
            if entry.nodes_before and entry.nodes_after != entry.nodes_before:
                log.info("job %s: resumed on %d nodes (was %d)", rec.job_id, entry.nodes_after, entry.nodes_before)

    async def _restart(
        self, rec: JobRecord, sj: SlurmJob, term: Termination, policy: Policy, decision: Decision, step: int
    ) -> None:
        now = time.time()
        excluded = still_excluded(rec, now)
        if policy.exclude_failed_nodes and term.failed_nodes:
            excluded = tuple(sorted(set(excluded) | set(term.failed_nodes)))
        if term.slurm_requeued and sj.restart_count > rec.acked_restarts + 1:
            # Slurm requeued it more than once between two looks: each of those is a restart too.
            for _ in range(sj.restart_count - rec.acked_restarts - 1):
                await self._record(
                    rec,
                    RestartEntry(
                        term.cause,
                        (),
                        now,
                        step,
                        0,
                        f"{term.detail or term.cause.value.lower()} (an earlier requeue by Slurm, seen late)",
                        detected_by="slurm",
                    ),
                )
        failed = sj.end_time if sj.end_time and sj.state.terminal else self._ended_at.get(rec.record_id, now)
        entry = RestartEntry(
            term.cause,
            term.failed_nodes,
            now,
            step,
            term.exit_code,
            decision.reason,
            nodes_before=len(term.nodes),
            detected_by=term.detected_by,
            phases={**self.run_notes(rec), "failed": min(failed, now), "detected": now},
        )
        # Persist the decision before acting on it: a crash after this line re-issues, never repeats.
        rec.acked_restarts = sj.restart_count + (0 if term.slurm_requeued else 1)
        rec.excluded_nodes = excluded
        rec.terminal = False
        rec.needs_release = True
        rec.backoff_seconds = policy.backoff_seconds
        await self._record(rec, entry)
        REQUEUES.labels(cause=term.cause.value).inc()
        log.info(
            "job %s: restart %d (%s), excluding %s",
            rec.job_id,
            len(rec.restarts),
            decision.reason,
            ",".join(excluded) or "nothing",
        )
        if not term.slurm_requeued:
            try:
                await self._backend.requeue(rec.job_id)
            except SlurmError as exc:
                log.warning("job %s: scontrol requeue failed (%s); will retry", rec.job_id, exc)
        await self.amend_phase(rec, "requeued", time.time())
        await self._release(rec, exclude=excluded or None)
        self._events.publish(JobEvent(EventType.RESTARTED, rec, message=decision.reason))

    async def _keep_released(self, rec: JobRecord, sj: SlurmJob) -> None:
        """Re-apply the release while Slurm still holds the job.

        After a node failure Slurm requeues in two steps: the job turns PENDING at once, and again
        when the surviving nodes have finished cleaning up (it may show COMPLETING in between),
        which sets a fresh ~120 s BeginTime. So the release is repeated, at most every few
        seconds, whenever the job is held on its begin time, until it runs.
        """
        if sj.state == JobState.PENDING and sj.reason == "BeginTime":
            held = self._held_since.setdefault(rec.job_id, time.time())
            if time.monotonic() - self._released_at.get(rec.job_id, 0.0) >= _RELEASE_EVERY_SECONDS:
                await self._release(rec, held_since=held)
        elif sj.state == JobState.RUNNING or sj.state.terminal:
            rec.needs_release = False
            self._released_at.pop(rec.job_id, None)
            self._held_since.pop(rec.job_id, None)
            await self._store.save(rec)

    async def _release(
        self, rec: JobRecord, exclude: tuple[str, ...] | None = None, *, held_since: float | None = None
    ) -> None:
        """Exclude failed nodes and start the pending job now (or when its backoff ends).

        ``exclude`` is given at the decision (the job may still be ending); later looks pass
        ``held_since`` (when Slurm was first seen holding it) and release only once the start may
        happen at once: ``StartTime=now`` makes slurmctld schedule the job right away, where a
        future StartTime waits for its next scheduling pass.
        """
        decision = exclude is not None
        exclude = exclude if decision else (rec.excluded_nodes or None)
        last = rec.restarts[-1].time if rec.restarts else time.time()
        gap = held_since + _CREDENTIAL_GAP_SECONDS if held_since is not None else last + _MIN_RESTART_DELAY_SECONDS
        ready = max(last + rec.backoff_seconds, gap)
        remaining = max(0, math.ceil(ready - time.time()))
        if not decision and ready > time.time():
            return  # a later look (the poll hurries during recoveries) releases it with StartTime=now
        self._released_at[rec.job_id] = time.monotonic()
        try:
            await self._backend.update_job(rec.job_id, exclude_nodes=exclude, start_after=remaining)
        except SlurmError as exc:
            log.info("job %s: not released yet (%s); retrying on the next poll", rec.job_id, exc)

    def _cancelled_while_restarting(self, rec: JobRecord, sj: SlurmJob) -> Outcome:
        """A cancel (the user's, or an administrator's scancel) that landed before the decided
        requeue showed up in Slurm wins: the requeue is never sent again."""
        who = "its user" if rec.user_cancelled else "Slurm (scancel)"
        log.info("job %s: cancelled by %s while a restart was pending; not requeued", rec.job_id, who)
        rec.needs_release = False
        rec.final_cause = Cause.CANCELLED
        return Outcome(finish=f"cancelled by {who} while a restart was pending ({sj.state.value})")

    async def _reissue_requeue(self, rec: JobRecord) -> Outcome:
        last = rec.restarts[-1].time if rec.restarts else 0.0
        if time.time() - last < _REISSUE_AFTER_SECONDS:
            return _NOTHING
        log.warning("job %s: requeue decided but not seen in Slurm; sending it again", rec.job_id)
        try:
            await self._backend.requeue(rec.job_id)
        except SlurmUnavailable as exc:  # Slurm did not answer: nothing was refused, try again later
            log.warning("job %s: requeue not sent, Slurm unavailable (%s); retrying", rec.job_id, exc)
            return _NOTHING
        except SlurmError as exc:
            log.error("job %s: cannot requeue: %s", rec.job_id, exc)
            rec.final_cause = Cause.RESTARTS_EXHAUSTED
            return Outcome(finish=f"Slurm refused the requeue: {exc}")
        rec.needs_release = True
        await self._store.save(rec)
        return _NOTHING

    async def _stop(self, rec: JobRecord, term: Termination, decision: Decision) -> Outcome:
        if term.slurm_requeued:
            # Slurm requeued it on its own but the policy says stop: take it out of the queue.
            try:
                await self._backend.cancel(rec.job_id)
            except SlurmError as exc:
                log.warning("job %s: cannot cancel Slurm's own requeue: %s", rec.job_id, exc)
        rec.final_cause = decision.final_cause or term.cause
        return Outcome(finish=decision.reason)


def relaunches(rec: JobRecord) -> int:
    """In-place relaunches of the job's current Slurm run: its newest restarts made in place."""
    count = 0
    for entry in reversed(rec.restarts):
        if not entry.detail.startswith("in place: "):
            break
        count += 1
    return count


def in_place_nodes(rec: JobRecord, det: Detection, sj: SlurmJob) -> tuple[str, ...] | None:
    """The nodes the relaunched step runs on: the run's surviving rank nodes plus spares, all of them
    in Slurm's allocation of this job; None when too few are left (then the job is requeued).

    The ranks' beats only say which allocated nodes the ranks ran on (the spares are the others);
    a node outside the job's allocation is never named, whatever the beats claim.
    """
    alloc = [n for n in sj.nodes if n not in det.nodes and n not in rec.excluded_nodes]
    want = rec.spec.nodes
    kept = [n for n in alloc if n in det.rank_nodes]
    spares = [n for n in alloc if n not in det.rank_nodes]
    nodes = (kept + spares)[:want]
    return tuple(sorted(nodes)) if want and len(nodes) == want else None


def still_excluded(rec: JobRecord, now: float) -> tuple[str, ...]:
    """The job's excluded nodes that still deserve it: the user's own (--exclude), and those that
    failed it within the last ``_EXCLUDE_FOR_SECONDS``. A node that failed once long ago (or was
    merely slow) is healthy again as far as this job can know; excluding it for good would shrink
    the job's cluster with every failure."""
    failed = {n for r in rec.restarts for n in r.failed_nodes}
    recent = {n for r in rec.restarts if now - r.time < _EXCLUDE_FOR_SECONDS for n in r.failed_nodes}
    return tuple(sorted(n for n in rec.excluded_nodes if n not in failed or n in recent))
