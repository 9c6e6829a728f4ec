"""JobManager: the domain object behind JobService (servicers stay thin, STYLE 11).

Submission order matters for the guarantees: validate (nothing reaches Slurm when it fails) ->
plan placement -> reserve the request_id in the store (the database picks the one caller that may
submit) -> sbatch -> record the Slurm id. The sbatch + record step is shielded from the caller's
cancellation so that a disconnect cannot leave a job in Slurm that the store does not know.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.auth.identity import Identity
from clusterd.config import Config
from clusterd.errors import (
    AlreadyExists,
    FailedPrecondition,
    NotFound,
    PermissionDenied,
    SlurmError,
    SlurmUnavailable,
    key_line,
)
from clusterd.jobs.script import inject_environment, job_environment
from clusterd.jobs.submission import persisted_spec, same_request, settle_directories, with_signal
from clusterd.jobs.users import UnixUser, resolve_unix_user
from clusterd.jobs.validate import validate_spec
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.request import ExportMode, JobRequest
from clusterd.slurm.types import JobState
from clusterd.store.records import JobRecord, Phase, RestartEntry
from clusterd.store.sqlite import JobStore
from clusterd.supervisor.events import EventBus, EventType, JobEvent
from clusterd.supervisor.poller import QueuePoller

log = logging.getLogger(__name__)

# Given a validated request and its placement preference: (the request with its placement fields
# planned, explanation). Raises InvalidArgument when the request can never be placed.
Placer = Callable[[JobRequest, cluster_pb2.PlacementPreference], tuple[JobRequest, str]]

_DUPLICATE_WAIT_SECONDS = 60.0


class JobManager:
    def __init__(
        self,
        config: Config,
        backend: SlurmBackend,
        store: JobStore,
        poller: QueuePoller,
        bus: EventBus,
        placer: Placer,
    ) -> None:
        self._config = config
        self._backend = backend
        self._store = store
        self._poller = poller
        self._bus = bus
        self._placer = placer

    # -- submit -----------------------------------------------------------------------------

    async def submit(self, ident: Identity, spec: jobs_pb2.JobSpec) -> tuple[JobRecord, bool]:
        """Returns (record, duplicate). Raises InvalidArgument before anything reaches Slurm."""
        request = validate_spec(spec, self._poller.facts(), self._config.limits)
        request, explanation = self._placer(request, spec.placement)
        unix_user = await asyncio.to_thread(resolve_unix_user, ident.user)
        try:
            request = await asyncio.to_thread(settle_directories, request, unix_user, self._config.slurm.job_root)
        except OSError as exc:
            raise FailedPrecondition(f"cannot create the job directory for {unix_user.name}: {exc}") from exc
        request = with_signal(request, spec, self._config.slurm.signal_before_timeout_seconds)
        stored = persisted_spec(spec, request)
        rec, created = await self._store.reserve(ident.user, spec.request_id, stored)
        if not created:
            if not same_request(rec.spec, stored):
                first = f"job {rec.job_id}" if rec.job_id else f"record {rec.record_id} (still submitting)"
                raise AlreadyExists(f"request_id {spec.request_id!r} was already used for a different request: {first}")
            return await self._await_existing(rec), True

        async def submit_locked() -> JobRecord:
            # Holding the record's lock tells the poller this submission is alive: it must not
            # settle the record as crashed while sbatch is still running.
            async with self._store.record_lock(rec.record_id):
                return await self._submit_reserved(rec, spec, request, explanation, unix_user)

        return await asyncio.shield(submit_locked()), False

    async def _submit_reserved(
        self, rec: JobRecord, spec: jobs_pb2.JobSpec, request: JobRequest, explanation: str, unix_user: UnixUser
    ) -> JobRecord:
        variables = dict(request.export.variables) if request.export.mode is not ExportMode.NONE else {}
        env = job_environment(variables, record_id=rec.record_id, checkpoint_uri=spec.checkpoint_uri)
        request = replace(
            request, user=unix_user.name, comment=rec.comment_tag, script=inject_environment(request.script, env)
        )
        try:
            job_id = await self._backend.submit(request)
        except SlurmUnavailable:
            # sbatch may or may not have reached slurmctld: the record stays SUBMITTING and the
            # poller settles it by finding (or not) the job tagged with this record's comment.
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
        await self._store.save(rec)
        self._bus.publish(JobEvent(EventType.SUBMITTED, rec))
        self._poller.kick()
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

    async def get(self, ident: Identity, job_id: str) -> JobRecord:
        rec = await self._store.get_by_job_id(job_id)
        if rec is None:
            raise NotFound(f"no job {job_id!r} was submitted through this service")
        ident.check_owner(rec.user, f"job {job_id}")
        return rec

    async def list(
        self,
        ident: Identity,
        *,
        user: str,
        include_finished: bool,
        limit: int,
        states: frozenset[JobState] = frozenset(),
    ) -> list[JobRecord]:
        if user and user != ident.user and not ident.admin:
            raise PermissionDenied("only admins may list other users' jobs")
        who: str | None = ident.user if not user else (None if user == "*" else user)
        limit = min(limit or self._config.limits.list_default_limit, self._config.limits.list_default_limit)
        return await self._store.list(user=who, include_finished=include_finished, limit=limit, states=states)

    # -- mutate -----------------------------------------------------------------------------

    async def cancel(self, ident: Identity, job_id: str) -> JobRecord:
        rec = await self.get(ident, job_id)
        async with self._store.record_lock(rec.record_id):
            rec = await self.get(ident, job_id)
            if rec.terminal:
                return rec
            rec.user_cancelled = True
            await self._store.save(rec)  # before scancel: the supervisor must never requeue it
            try:
                await self._backend.cancel(job_id)
            except SlurmError as exc:
                rec.user_cancelled = False
                await self._store.save(rec)
                raise FailedPrecondition(f"Slurm cannot cancel job {job_id}: {exc.detail}") from exc
        self._poller.kick()
        return rec

    async def requeue(self, ident: Identity, job_id: str) -> JobRecord:
        rec = await self.get(ident, job_id)
        async with self._store.record_lock(rec.record_id):
            rec = await self.get(ident, job_id)
            if rec.user_cancelled:
                raise FailedPrecondition(f"job {job_id} was cancelled by its user; submit it again instead")
            try:
                await self._backend.requeue(job_id)
            except SlurmError as exc:
                raise FailedPrecondition(f"Slurm cannot requeue job {job_id}: {exc.detail}") from exc
            entry = RestartEntry("MANUAL_REQUEUE", rec.nodes, time.time(), rec.checkpoint_step, rec.exit_code,
                                 f"requested by {ident.user}")  # fmt: skip
            rec.acked_restarts = rec.restart_count + 1
            rec.needs_release = True
            rec.terminal = False
            rec.final_reason = ""
            await self._store.record_restart(rec, entry)
        self._bus.publish(JobEvent(EventType.RESTARTED, rec, message=entry.detail))
        self._poller.kick()
        return rec


def _relayed(exc: SlurmError) -> str:
    """sbatch's stderr for the caller: its key line first, then the rest (bounded)."""
    lines = [ln.strip() for ln in exc.stderr.strip().splitlines() if ln.strip()]
    key = key_line(lines) or exc.detail
    rest = [ln for ln in lines if ln != key and not ln.startswith("Try ")]
    return "\n".join([key, *rest])[:4000]
