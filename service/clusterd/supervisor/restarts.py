"""The supervisor: applies each job's restart policy to what the poller observes.

Requeues keep the Slurm job id (``scontrol requeue``), exclude the nodes that failed, and clear the
~120 s BeginTime hold Slurm puts on requeued jobs. ``JobRecord.acked_restarts`` (persisted before
acting) makes every decision happen once, also across a service restart in the middle of one.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

from clusterd.config import RestartDefaults
from clusterd.errors import SlurmError
from clusterd.observability.metrics import CHECKPOINT_COMMITS, CHECKPOINT_STEP, REQUEUES
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.types import JobState, NodeState, SlurmJob
from clusterd.store.records import JobRecord, RestartEntry
from clusterd.store.sqlite import JobStore
from clusterd.supervisor.events import EventBus, EventType, JobEvent
from clusterd.supervisor.policy import Cause, Decision, Policy, Termination, classify, decide, effective_policy
from clusterd.supervisor.poller import QueuePoller
from clusterd.supervisor.progress import ProgressTracker

log = logging.getLogger(__name__)

_REISSUE_AFTER_SECONDS = 15.0  # a decided requeue that Slurm has not shown by then is sent again
_RELEASE_EVERY_SECONDS = 3.0  # how often a held (BeginTime) requeued job is released again
# A requeued job launched within the same second its previous run's credential was revoked is
# killed by slurmd ("Job credential revoked"): start the next run a few seconds after the decision.
_MIN_RESTART_DELAY_SECONDS = 3.0


class Supervisor:
    def __init__(
        self,
        backend: SlurmBackend,
        store: JobStore,
        bus: EventBus,
        poller: QueuePoller,
        defaults: RestartDefaults,
        progress: ProgressTracker | None = None,
    ) -> None:
        self._backend = backend
        self._store = store
        self._bus = bus
        self._poller = poller
        self._defaults = defaults
        self._progress = progress or ProgressTracker()
        self._released_at: dict[str, float] = {}
        poller.on_transition = self.on_transition
        poller.on_finish = self._forget

    async def on_transition(self, rec: JobRecord, before_nodes: tuple[str, ...], sj: SlurmJob) -> None:
        if sj.state == JobState.RUNNING and rec.spec.checkpoint_uri:
            await self._report_progress(rec)
        if rec.needs_release:
            await self._keep_released(rec, sj)
        if sj.state.terminal and sj.restart_count < rec.acked_restarts:
            await self._reissue_requeue(rec)
            return
        down = frozenset(n.name for n in self._poller.snapshot.nodes if n.state == NodeState.DOWN)
        term = classify(rec, before_nodes, sj, down)
        if term is None:
            return
        step = rec.checkpoint_step
        if rec.spec.checkpoint_uri:
            latest = await self._progress.latest_step(rec.spec.checkpoint_uri, fresh=True)
            step = rec.checkpoint_step if latest is None else latest
        rec.checkpoint_step = step
        policy = effective_policy(rec.spec.restart_policy, self._defaults)
        decision = decide(term, policy, rec, step)
        if decision.requeue:
            await self._restart(rec, sj, term, policy, decision, step)
        else:
            await self._stop(rec, term, decision)

    def _forget(self, rec: JobRecord) -> None:
        self._released_at.pop(rec.job_id, None)
        # A finished job's series goes too: job ids would otherwise grow /metrics without bound.
        for family in (CHECKPOINT_COMMITS, CHECKPOINT_STEP):
            with contextlib.suppress(KeyError):
                family.remove(rec.job_id)

    async def _report_progress(self, rec: JobRecord) -> None:
        step = await self._progress.latest_step(rec.spec.checkpoint_uri)
        if step is not None and step > rec.checkpoint_step:
            CHECKPOINT_COMMITS.labels(job_id=rec.job_id).inc()
            CHECKPOINT_STEP.labels(job_id=rec.job_id).set(step)
            rec.checkpoint_step = step
            await self._store.save(rec)
            self._bus.publish(JobEvent(EventType.CHECKPOINT, rec, message=f"checkpoint step {step} committed"))

    async def _restart(
        self, rec: JobRecord, sj: SlurmJob, term: Termination, policy: Policy, decision: Decision, step: int
    ) -> None:
        excluded = rec.excluded_nodes
        if policy.exclude_failed_nodes and term.failed_nodes:
            excluded = tuple(sorted(set(excluded) | set(term.failed_nodes)))
        entry = RestartEntry(term.cause.value, term.failed_nodes, time.time(), step, term.exit_code, decision.reason)
        # Persist the decision before acting on it: a crash after this line re-issues, never repeats.
        rec.acked_restarts = sj.restart_count + (0 if term.slurm_requeued else 1)
        rec.excluded_nodes = excluded
        rec.terminal = False
        rec.needs_release = True
        rec.backoff_seconds = policy.backoff_seconds
        await self._store.record_restart(rec, entry)
        REQUEUES.labels(cause=term.cause.value).inc()
        log.info("job %s: restart %d (%s), excluding %s", rec.job_id, len(rec.restarts), decision.reason,
                 ",".join(excluded) or "nothing")  # fmt: skip
        if not term.slurm_requeued:
            try:
                await self._backend.requeue(rec.job_id)
            except SlurmError as exc:
                log.warning("job %s: scontrol requeue failed (%s); will retry", rec.job_id, exc)
        await self._release(rec, exclude=excluded or None)
        self._bus.publish(JobEvent(EventType.RESTARTED, rec, message=decision.reason))
        self._poller.kick()

    async def _keep_released(self, rec: JobRecord, sj: SlurmJob) -> None:
        """Re-apply the release while Slurm still holds the job.

        After a node failure Slurm requeues in two steps: the job turns PENDING at once, and again
        when the surviving nodes have finished cleaning up (it may show COMPLETING in between),
        which sets a fresh ~120 s BeginTime. So the release is repeated, at most every few
        seconds, whenever the job is held on its begin time, until it runs.
        """
        if sj.state == JobState.PENDING and sj.reason == "BeginTime":
            if time.monotonic() - self._released_at.get(rec.job_id, 0.0) >= _RELEASE_EVERY_SECONDS:
                await self._release(rec, exclude=None)
        elif sj.state == JobState.RUNNING or sj.state.terminal:
            rec.needs_release = False
            self._released_at.pop(rec.job_id, None)
            await self._store.save(rec)

    async def _release(self, rec: JobRecord, exclude: tuple[str, ...] | None) -> None:
        """Exclude failed nodes and start the pending job now (or when its backoff ends)."""
        if exclude is None and rec.excluded_nodes:
            exclude = rec.excluded_nodes
        last = rec.restarts[-1].time if rec.restarts else time.time()
        wait = max(rec.backoff_seconds, _MIN_RESTART_DELAY_SECONDS)
        remaining = max(0, math.ceil(last + wait - time.time()))
        self._released_at[rec.job_id] = time.monotonic()
        try:
            await self._backend.update_job(rec.job_id, exclude_nodes=exclude, start_after=remaining)
        except SlurmError as exc:
            log.info("job %s: not released yet (%s); retrying on the next poll", rec.job_id, exc)

    async def _reissue_requeue(self, rec: JobRecord) -> None:
        last = rec.restarts[-1].time if rec.restarts else 0.0
        if time.time() - last < _REISSUE_AFTER_SECONDS:
            return
        log.warning("job %s: requeue decided but not seen in Slurm; sending it again", rec.job_id)
        try:
            await self._backend.requeue(rec.job_id)
        except SlurmError as exc:
            log.error("job %s: cannot requeue: %s", rec.job_id, exc)
            rec.final_cause = Cause.RESTARTS_EXHAUSTED.value
            await self._poller.finish(rec, f"Slurm refused the requeue: {exc}")
            return
        rec.needs_release = True
        await self._store.save(rec)

    async def _stop(self, rec: JobRecord, term: Termination, decision: Decision) -> None:
        if term.slurm_requeued:
            # Slurm requeued it on its own but the policy says stop: take it out of the queue.
            try:
                await self._backend.cancel(rec.job_id)
            except SlurmError as exc:
                log.warning("job %s: cannot cancel Slurm's own requeue: %s", rec.job_id, exc)
        rec.final_cause = (decision.final_cause or term.cause).value
        await self._poller.finish(rec, decision.reason)
