"""JobManager: the domain object behind JobService (servicers stay thin).

Submission order matters for the guarantees: validate (nothing reaches Slurm when it fails) ->
plan placement -> reserve the request_id in the store (the database picks the one caller that may
submit) -> sbatch -> record the Slurm id. The sbatch + record step is shielded from the caller's
cancellation so that a disconnect cannot leave a job in Slurm that the store does not know. On a
store that orders its work (the embedded one) the caller is answered once that record is queued,
not yet committed: every later read sees it, and should clusterd die before the commit, the
reservation (committed before sbatch) is what the reconciler settles from the job's comment tag.

Tenancy lives here too: the reservation enforces the caller's quotas (security/limits.py), and
every mutating call writes its audit line (security/audit.py), refusals included. A Slurm job id
can name several records once Slurm reuses ids; a caller's id resolves to their own newest
record, and nothing is ever sent to Slurm for a record whose id now names a newer job.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

from clusterd.auth.identity import Identity
from clusterd.config import Config
from clusterd.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ServiceError,
    SlurmError,
    SlurmUnavailable,
    key_line,
)
from clusterd.jobs import adopt as adopt_checks
from clusterd.jobs.script import RANK_NODES, inject_environment, job_environment, tier_environment
from clusterd.jobs.submission import persisted_spec, settle_directories, with_signal
from clusterd.jobs.users import UnixUser, resolve_unix_user
from clusterd.jobs.validate import placement_preference, validate_spec
from clusterd.liveness import credentials
from clusterd.model.causes import Cause
from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec
from clusterd.security.audit import AuditLog, status_name
from clusterd.security.limits import Quotas
from clusterd.slurm.arrays import split_task_id
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.request import ExportMode, JobRequest
from clusterd.slurm.types import JobState
from clusterd.store.jobs import JobRecords
from clusterd.store.records import ArrayTask, JobRecord, Phase, RestartEntry
from clusterd.supervisor import array_view
from clusterd.supervisor.cache import QueueCache
from clusterd.supervisor.events import JobEvent
from clusterd.supervisor.reconciler import observe
from clusterd.supervisor.sink import EventSink
from clusterd.topology.demand import Preference

log = logging.getLogger(__name__)

# Given a validated request and its placement preference: (the request with its placement fields
# planned, explanation). Raises InvalidArgument when the request can never be placed.
Placer = Callable[[JobRequest, Preference], tuple[JobRequest, str]]

_DUPLICATE_WAIT_SECONDS = 60.0
_WHOLE_LOOK_WAIT = 15.0  # seconds an adoption waits for a whole-queue read (seconds on a 10,000-job queue)
_Call = TypeVar("_Call", bound=Callable[..., Awaitable[Any]])


def check_job_id(value: str, field: str = "job_id") -> tuple[str, int | None]:
    """A Slurm job id as a caller sends it (``14`` or one array task ``14_3``): (job id, task).

    Raises InvalidArgument naming ``field``.
    """
    if not value:
        raise InvalidArgument(field, "is required")
    try:
        return split_task_id(value)
    except ValueError as exc:
        raise InvalidArgument(field, str(exc)) from None


def _audited(method: str) -> Callable[[_Call], _Call]:
    """Write ``method``'s audit line when the call ends, with its outcome (refusals included), before
    the call is answered.

    The decorated method takes (identity, target): a job id, or a spec carrying a request_id.
    """

    def wrap(fn: _Call) -> _Call:
        @functools.wraps(fn)
        async def call(self: JobManager, ident: Identity, target: Any, *args: Any, **kwargs: Any) -> Any:
            job_id = target if isinstance(target, str) else ""
            result, error = "OK", ""
            try:
                out = await fn(self, ident, target, *args, **kwargs)
                job_id = job_id or (out[0] if isinstance(out, tuple) else out).job_id  # as named: "14_3" stays
                return out
            except BaseException as exc:
                result, error = status_name(exc), str(exc) if isinstance(exc, ServiceError) else ""
                raise
            finally:
                if self._audit is not None:
                    await self._audit.record(
                        user=ident.user,
                        admin=ident.admin,
                        method=method,
                        job_id=job_id,
                        request_id=getattr(target, "request_id", ""),
                        result=result,
                        error=error,
                    )

        return cast(_Call, call)

    return wrap


class JobManager:
    def __init__(
        self,
        config: Config,
        backend: SlurmBackend,
        store: JobRecords,
        cache: QueueCache,
        bus: EventSink,
        placer: Placer,
        *,
        quotas: Quotas | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        """``quotas`` defaults to ``config.limits`` over ``store``; without ``audit`` nothing is audited."""
        self._config = config
        self._backend = backend
        self._store = store
        self._cache = cache
        self._bus = bus
        self._placer = placer
        self._quotas = quotas or Quotas(store, config.limits)
        self._audit = audit
        self._submits: set[asyncio.Task[JobRecord]] = set()  # shielded: they outlive a cancelled caller

    # -- submit -----------------------------------------------------------------------------

    @_audited("SubmitJob")
    async def submit(self, ident: Identity, spec: JobSpec) -> tuple[JobRecord, bool]:
        """Returns (record, duplicate). Raises InvalidArgument before anything reaches Slurm."""
        request = validate_spec(spec, self._cache.facts(), self._config.limits)
        request, explanation = self._placer(request, placement_preference(spec.placement))
        unix_user, request = await self._user_and_directories(ident.user, request)
        request = with_signal(request, spec, self._config.slurm.signal_before_timeout_seconds)
        stored = persisted_spec(spec, request)
        rec, created = await self._quotas.reserve_submit(ident.user, stored, tasks=request.task_count)
        if not created:
            if rec.spec != stored:  # the retry of a request asks for the same job
                first = f"job {rec.job_id}" if rec.job_id else f"record {rec.record_id} (still submitting)"
                raise AlreadyExists(f"request_id {spec.request_id!r} was already used for a different request: {first}")
            return await self._await_existing(rec), True

        async def submit_locked() -> JobRecord:
            # Holding the record's lock tells the reconciler this submission is alive: it must not
            # settle the record as crashed while sbatch is still running.
            async with self._store.record_lock(rec.record_id):
                return await self._submit_reserved(rec, spec, request, explanation, unix_user)

        task = asyncio.create_task(submit_locked())
        self._submits.add(task)
        task.add_done_callback(self._submits.discard)
        return await asyncio.shield(task), False

    async def _user_and_directories(self, name: str, request: JobRequest) -> tuple[UnixUser, JobRequest]:
        """The caller's Unix account and the request's directories settled with its rights, checked
        at every submit in one worker-thread hop for both blocking steps."""
        return await asyncio.to_thread(self._settle, name, request)

    def _settle(self, name: str, request: JobRequest) -> tuple[UnixUser, JobRequest]:
        unix_user = resolve_unix_user(name)
        try:
            return unix_user, settle_directories(request, unix_user, self._config.slurm.job_root)
        except OSError as exc:
            raise FailedPrecondition(f"cannot create the job directory for {unix_user.name}: {exc}") from exc

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for submissions still running (shutdown closes the store after)."""
        if self._submits:
            await asyncio.wait(set(self._submits), timeout=timeout)

    async def _submit_reserved(
        self, rec: JobRecord, spec: JobSpec, request: JobRequest, explanation: str, unix_user: UnixUser
    ) -> JobRecord:
        variables = dict(request.export.variables) if request.export.mode is not ExportMode.NONE else {}
        env = job_environment(variables, record_id=rec.record_id, checkpoint_uri=spec.checkpoint_uri)
        beat_env, rec.heartbeat_token_sha256 = credentials.issue(spec, self._config.liveness, self._config.listen)
        env.update(beat_env)
        if spec.checkpoint_tier == "memory":
            env.update(tier_environment(rec.record_id))
        if spec.spare_nodes and request.nodes:  # validate_spec made it N + spares
            env[RANK_NODES] = str(request.nodes - spec.spare_nodes)
        request = replace(
            request,
            user=unix_user.name,
            comment=rec.tagged(request.comment),
            script=inject_environment(request.script, env),
        )
        try:
            job_id = await self._backend.submit(request)
        except SlurmUnavailable:
            # sbatch may or may not have reached slurmctld: the record stays SUBMITTING and the
            # reconciler settles it by finding (or not) the job tagged with this record's comment.
            raise
        except SlurmError as exc:
            await self._fail(rec, str(exc))
            raise FailedPrecondition(f"Slurm refused the job: {_relayed(exc)}") from exc
        rec.job_id = job_id
        rec.name = request.name
        rec.phase = Phase.SUBMITTED
        rec.state = JobState.PENDING
        rec.partition = request.partition
        rec.submit_time = time.time()
        rec.placement_explanation = explanation
        rec.excluded_nodes = request.exclude
        rec.array = rec.spec.array  # persisted_spec resolved it (#SBATCH --array included)
        await self._store.save(rec)  # durable: an acknowledged submit is recorded
        self._bus.publish(JobEvent(EventType.SUBMITTED, rec))
        log.info("submitted job %s for %s (record %s)", job_id, rec.user, rec.record_id)
        return rec

    async def _fail(self, rec: JobRecord, error: str) -> None:
        rec.phase = Phase.FAILED
        rec.error = error
        await self._store.save(rec)

    async def _await_existing(self, rec: JobRecord) -> JobRecord:
        """A retry of a request_id another call is still submitting: wait for its outcome."""
        deadline = time.monotonic() + _DUPLICATE_WAIT_SECONDS
        while rec.phase is Phase.SUBMITTING and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            fresh = await self._store.get_by_record(rec.record_id)
            if fresh is None:
                break
            rec = fresh
        if rec.phase is Phase.SUBMITTED:
            return rec
        if rec.phase is Phase.FAILED:
            raise FailedPrecondition(f"the earlier submission with this request_id failed: {rec.error}")
        raise SlurmUnavailable("sbatch", None, "an earlier submission with this request_id is still unresolved")

    # -- read -------------------------------------------------------------------------------

    async def get(self, ident: Identity, job_id: str, *, with_spec: bool = True) -> JobRecord:
        """The caller's newest record under Slurm id ``job_id`` (an admin: the current one).

        ``with_spec=False``: a compact row, for callers that show status only. Raises
        InvalidArgument (malformed id), PermissionDenied (only others hold it), NotFound.
        """
        job_id, task = check_job_id(job_id)
        rec = await self._store.get_by_job_id(job_id, user=None if ident.admin else ident.user, with_spec=with_spec)
        if rec is None:
            rec = await self._store.get_by_job_id(job_id, with_spec=False)  # another user's, if any
            if rec is None:
                raise NotFound(f"no job {job_id!r} was submitted through this service")
        ident.check_owner(rec.user, f"job {job_id}")  # an array task belongs to its array's owner
        if task is not None and task not in set(array_view.indices(rec)) | set(rec.array_tasks):
            raise NotFound(f"job {job_id} has no array task {task}" if rec.array else f"job {job_id} is not an array")
        return rec

    def watch_ids(self, job_ids: Sequence[str]) -> frozenset[str]:
        """The job ids a WatchJobs call names, checked: well-formed and at most a list's worth."""
        most = self._config.limits.list_default_limit
        if len(job_ids) > most:
            raise InvalidArgument("job_ids", f"more than {most} ids (limits.list_default_limit)")
        return frozenset(check_job_id(j, "job_ids")[0] for j in job_ids)

    async def list(
        self,
        ident: Identity,
        *,
        user: str,
        include_finished: bool,
        limit: int,
        states: frozenset[JobState] = frozenset(),
    ) -> list[JobRecord]:
        """Compact records (no spec), newest first: the caller's, or, for an admin, anyone's ("*")."""
        if user and user != ident.user and not ident.admin:
            raise PermissionDenied("only admins may list other users' jobs")
        who: str | None = ident.user if not user else (None if user == "*" else user)
        limit = min(limit or self._config.limits.list_default_limit, self._config.limits.list_default_limit)
        return await self._store.list(user=who, include_finished=include_finished, limit=limit, states=states)

    # -- mutate -----------------------------------------------------------------------------

    async def _owned(self, job_id: str, record_id: int) -> JobRecord:
        """The caller's record re-read under its lock, refused if Slurm's id now names another job."""
        rec = await self._store.get_by_record(record_id)
        if rec is None:
            raise NotFound(f"job {job_id} is no longer on record")
        if rec.superseded:
            raise FailedPrecondition(
                f"Slurm gave job id {job_id} to a newer job after losing its state; "
                "this record's job is gone and nothing was sent to Slurm"
            )
        seen = self._cache.snapshot.jobs.get(job_id)
        if seen is not None and not rec.adopts(seen):
            # Slurm reused the id (for another record's job, or a plain sbatch) and the store has not
            # caught up yet: the job under this id is not this record's, so nothing may act on it.
            raise FailedPrecondition(
                f"Slurm job {job_id} is now another submission, not this record's job; nothing was sent to Slurm"
            )
        return rec

    @_audited("CancelJob")
    async def cancel(self, ident: Identity, job_id: str) -> JobRecord:
        rec = await self.get(ident, job_id, with_spec=False)
        parent, task = check_job_id(job_id)
        if task is not None:
            return await self._cancel_task(rec, parent, task)
        if rec.terminal:
            return rec  # superseded records are terminal too: nothing to cancel, nothing sent
        async with self._store.record_lock(rec.record_id):
            rec = await self._owned(job_id, rec.record_id)
            if rec.terminal:
                return rec
            rec.user_cancelled = True
            await self._store.save(rec)  # before scancel: the supervisor must never requeue it
            try:
                await self._backend.cancel(job_id)
            except SlurmError as exc:
                rec.user_cancelled = False
                await self._store.save(rec)
                if isinstance(exc, SlurmUnavailable):
                    raise  # UNAVAILABLE: retryable, unlike a refusal
                raise FailedPrecondition(f"Slurm cannot cancel job {job_id}: {exc.detail}") from exc
        self._cache.kick()
        return rec

    async def _cancel_task(self, rec: JobRecord, parent: str, task_id: int) -> JobRecord:
        """``scancel ID_TASK``: that task only; it is never requeued afterwards."""
        if rec.terminal:
            return rec
        async with self._store.record_lock(rec.record_id):
            rec = await self._owned(parent, rec.record_id)
            task = rec.array_tasks.setdefault(task_id, ArrayTask())
            if task.state.terminal or rec.terminal:
                return rec
            task.cancelled = True
            await self._store.save(rec)  # before scancel: the supervisor must never requeue it
            try:
                await self._backend.cancel(f"{parent}_{task_id}")
            except SlurmError as exc:
                task.cancelled = False
                await self._store.save(rec)
                raise FailedPrecondition(f"Slurm cannot cancel job {parent}_{task_id}: {exc.detail}") from exc
        self._cache.kick()
        return rec

    async def _requeue_task(self, ident: Identity, rec: JobRecord, parent: str, task_id: int) -> JobRecord:
        """``scontrol requeue ID_TASK``: that task runs again; the rest of the array is untouched."""
        async with self._store.record_lock(rec.record_id):
            rec = await self._owned(parent, rec.record_id)
            task = rec.array_tasks.get(task_id)
            if task is None or rec.user_cancelled or task.cancelled:
                why = "has not started" if task is None else "was cancelled by its user"
                raise FailedPrecondition(f"task {parent}_{task_id} {why}; nothing to requeue")
            try:
                await self._backend.requeue(f"{parent}_{task_id}")
            except SlurmError as exc:
                raise FailedPrecondition(f"Slurm cannot requeue job {parent}_{task_id}: {exc.detail}") from exc
            entry = RestartEntry(
                Cause.MANUAL_REQUEUE,
                task.nodes,
                time.time(),
                rec.checkpoint_step,
                task.exit_code,
                f"task {task_id}: requested by {ident.user}",
            )
            task.restart_count += 1
            task.state = JobState.PENDING
            array_view.derive(rec)
            rec.terminal = False
            rec.final_reason = ""
            await self._store.record_restart(rec, entry)
        self._bus.publish(JobEvent(EventType.RESTARTED, rec, message=entry.detail))
        self._cache.kick()
        return rec

    @_audited("RequeueJob")
    async def requeue(self, ident: Identity, job_id: str) -> JobRecord:
        rec = await self.get(ident, job_id, with_spec=False)
        parent, task = check_job_id(job_id)
        if task is not None:
            return await self._requeue_task(ident, rec, parent, task)
        async with self._store.record_lock(rec.record_id):
            rec = await self._owned(job_id, rec.record_id)
            if rec.user_cancelled:
                raise FailedPrecondition(f"job {job_id} was cancelled by its user; submit it again instead")
            try:
                await self._backend.requeue(job_id)
            except SlurmUnavailable:
                raise  # UNAVAILABLE: retryable, unlike a refusal
            except SlurmError as exc:
                raise FailedPrecondition(f"Slurm cannot requeue job {job_id}: {exc.detail}") from exc
            entry = RestartEntry(
                Cause.MANUAL_REQUEUE,
                rec.nodes,
                time.time(),
                rec.checkpoint_step,
                rec.exit_code,
                f"requested by {ident.user}",
                nodes_before=len(rec.nodes),
            )
            rec.acked_restarts = rec.restart_count + 1
            rec.needs_release = True
            rec.terminal = False
            rec.final_reason = ""
            await self._store.record_restart(rec, entry)
        self._bus.publish(JobEvent(EventType.RESTARTED, rec, message=entry.detail))
        self._cache.kick()
        return rec

    # -- hold / release ---------------------------------------------------------------------

    @_audited("HoldJob")
    async def hold(self, ident: Identity, job_id: str) -> JobRecord:
        """``scontrol uhold``: a pending job (or array task) stays pending until released."""
        return await self._set_hold(ident, job_id, hold=True)

    @_audited("ReleaseJob")
    async def release(self, ident: Identity, job_id: str) -> JobRecord:
        return await self._set_hold(ident, job_id, hold=False)

    async def _set_hold(self, ident: Identity, job_id: str, *, hold: bool) -> JobRecord:
        rec = await self.get(ident, job_id, with_spec=False)
        parent, _task = check_job_id(job_id)
        verb = "hold" if hold else "release"
        if rec.terminal:
            raise FailedPrecondition(f"job {job_id} has ended ({rec.state.value}); nothing to {verb}")
        async with self._store.record_lock(rec.record_id):
            await self._owned(parent, rec.record_id)
            try:
                await (self._backend.hold if hold else self._backend.release)(job_id, user=ident.user)
            except SlurmUnavailable:
                raise  # UNAVAILABLE: retryable, unlike a refusal
            except SlurmError as exc:
                raise FailedPrecondition(f"Slurm cannot {verb} job {job_id}: {exc.detail}") from exc
        self._cache.kick()
        return rec

    # -- adopt ------------------------------------------------------------------------------

    @_audited("AdoptJob")
    async def adopt(self, ident: Identity, job_id: str, checkpoint_uri: str = "") -> tuple[JobRecord, bool]:
        """Supervise the caller's plain-sbatch job ``job_id``: returns (record, already supervised).

        Raises InvalidArgument, NotFound, PermissionDenied (not the owner), FailedPrecondition.
        """
        parent, task = check_job_id(job_id)
        if task is not None:
            raise InvalidArgument("job_id", "adopt the whole job, not one array task")
        uri = adopt_checks.check_checkpoint_uri(checkpoint_uri)
        snap = self._cache.snapshot
        if parent not in snap.jobs and parent not in snap.arrays and not snap.whole:
            # Partial polls skip other users' pending jobs, this one until it is adopted.
            snap = await self._cache.whole_look(_WHOLE_LOOK_WAIT)
        job = adopt_checks.adoptable(ident, parent, snap)
        current = await self._store.get_by_job_id(parent, with_spec=False)
        if current is not None and not current.superseded and current.adopts(job):
            return current, True
        spec = adopt_checks.adoption_spec(job, uri)
        rec, created = await self._quotas.reserve_submit(ident.user, spec, tasks=1)
        if not created:
            return await self._await_existing(rec), True
        async with self._store.record_lock(rec.record_id):
            try:
                await self._backend.mark_supervised(parent, rec.tagged(job.comment))
            except SlurmError as exc:
                await self._fail(rec, str(exc))
                if isinstance(exc, SlurmUnavailable):
                    raise
                raise FailedPrecondition(f"Slurm cannot update job {parent}: {exc.detail}") from exc
            rec.job_id, rec.phase, rec.partition = parent, Phase.SUBMITTED, job.partition
            observe(rec, job)
            rec.acked_restarts = job.restart_count  # restarts before adoption are not the service's to handle
            rec.placement_explanation = "adopted: submitted with sbatch, placed by Slurm"
            await self._store.save(rec)
        self._bus.publish(JobEvent(EventType.SUBMITTED, rec, message=f"adopted by {ident.user}"))
        await self._await_tag(parent, rec.tagged(job.comment))
        log.info("adopted job %s for %s (record %s)", parent, rec.user, rec.record_id)
        return rec, False

    async def _await_tag(self, job_id: str, tag: str) -> None:
        """Until a poll shows the adopted job's new tag, the cache still calls it someone else's job
        (``_owned`` refuses a cancel then): wait a few polls for it, at most."""
        deadline = time.monotonic() + min(max(3 * self._config.poll_interval_seconds, 5.0), 15.0)
        while time.monotonic() < deadline:
            self._cache.kick()
            seen = self._cache.snapshot.jobs.get(job_id)
            if seen is None or seen.comment == tag:
                return
            await asyncio.sleep(0.2)


def _relayed(exc: SlurmError) -> str:
    """sbatch's stderr for the caller: its key line first, then the rest (bounded)."""
    lines = [ln.strip() for ln in exc.stderr.strip().splitlines() if ln.strip()]
    key = key_line(lines) or exc.detail
    rest = [ln for ln in lines if ln != key and not ln.startswith("Try ")]
    return "\n".join([key, *rest])[:4000]
