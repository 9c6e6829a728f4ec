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

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.auth.identity import Identity
from clusterd.config import Config
from clusterd.errors import FailedPrecondition, NotFound, PermissionDenied, SlurmError, SlurmUnavailable
from clusterd.jobs.options import job_environment, sbatch_options
from clusterd.jobs.script import inject_environment
from clusterd.jobs.users import UnixUser, job_dir, resolve_unix_user
from clusterd.jobs.validate import ResolvedJob, validate_spec
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.types import JobState, SubmitArgs
from clusterd.store.records import JobRecord, Phase, RestartEntry
from clusterd.store.sqlite import JobStore
from clusterd.supervisor.cache import QueueCache
from clusterd.supervisor.events import EventBus, EventType, JobEvent

log = logging.getLogger(__name__)

# Given a resolved job and its placement preference: (sbatch args, explanation). Raises
# InvalidArgument when the request can never be placed.
Placer = Callable[[ResolvedJob, cluster_pb2.PlacementPreference], tuple[list[str], str]]

_DUPLICATE_WAIT_SECONDS = 60.0


class JobManager:
    def __init__(
        self,
        config: Config,
        backend: SlurmBackend,
        store: JobStore,
        poller: QueueCache,
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
        resolved = validate_spec(spec, self._poller.facts(), self._config.limits)
        placement_args, explanation = self._placer(resolved, spec.placement)
        unix_user = resolve_unix_user(ident.user)
        rec, created = await self._store.reserve(ident.user, spec.request_id, spec)
        if not created:
            return await self._await_existing(rec), True

        async def submit_locked() -> JobRecord:
            # Holding the record's lock tells the poller this submission is alive: it must not
            # settle the record as crashed while sbatch is still running.
            async with self._store.record_lock(rec.record_id):
                return await self._submit_reserved(rec, spec, resolved, placement_args, explanation, unix_user)

        return await asyncio.shield(submit_locked()), False

    async def _submit_reserved(
        self,
        rec: JobRecord,
        spec: jobs_pb2.JobSpec,
        resolved: ResolvedJob,
        placement_args: list[str],
        explanation: str,
        unix_user: UnixUser,
    ) -> JobRecord:
        slurm_cfg = self._config.slurm
        try:
            out_dir = job_dir(slurm_cfg.job_root, unix_user)
        except OSError as exc:
            await self._fail(rec, f"cannot create job directory: {exc}")
            raise FailedPrecondition(f"cannot create the job directory for {unix_user.name}: {exc}") from exc
        signal_before = (
            spec.restart_policy.signal_before_timeout_seconds
            if spec.restart_policy.HasField("signal_before_timeout_seconds")
            else slurm_cfg.signal_before_timeout_seconds
        )
        if resolved.time_limit_seconds is not None and signal_before >= resolved.time_limit_seconds:
            signal_before = max(resolved.time_limit_seconds // 4, 1)
        options = sbatch_options(
            spec,
            resolved,
            comment=rec.comment_tag,
            signal_before_timeout=signal_before,
            placement_args=placement_args,
            output_dir=out_dir,
        )
        script = inject_environment(resolved.script, job_environment(spec, record_id=rec.record_id))
        args = SubmitArgs(
            options=tuple(options),
            script=script,
            environment=_submit_environment(unix_user, slurm_cfg.job_path),
            uid=unix_user.uid,
            gid=unix_user.gid,
            working_directory=spec.working_directory or (None if "chdir" in resolved.directives else out_dir),
        )
        try:
            job_id = await self._backend.submit(args)
        except SlurmUnavailable:
            # sbatch may or may not have reached slurmctld: the record stays SUBMITTING and the
            # poller settles it by finding (or not) the job tagged with this record's comment.
            raise
        except SlurmError as exc:
            await self._fail(rec, str(exc))
            raise FailedPrecondition(f"Slurm refused the job: {exc.detail}") from exc
        rec.job_id = job_id
        rec.name = resolved.name
        rec.phase = Phase.SUBMITTED
        rec.state = JobState.PENDING
        rec.partition = resolved.partition
        rec.submit_time = time.time()
        rec.placement_explanation = explanation
        rec.excluded_nodes = tuple(spec.placement.exclude_nodes)
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
        self, ident: Identity, *, user: str, include_finished: bool, limit: int,
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


def _submit_environment(user: UnixUser, job_path: str) -> dict[str, str]:
    """sbatch's own environment, which ``--export=ALL`` hands to the job: identity and PATH only."""
    env = {"HOME": user.home, "USER": user.name, "LOGNAME": user.name}
    if job_path:
        env["PATH"] = job_path
    return env
