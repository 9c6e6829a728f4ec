"""JobService: validate the request shape, call JobManager, map to protos. Nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd.api import convert
from clusterd.api.spec_convert import spec_from_proto
from clusterd.auth.identity import Identity, current_identity
from clusterd.errors import FailedPrecondition, InvalidArgument, OutOfRange
from clusterd.jobs.manager import JobManager
from clusterd.liveness.heartbeats import HeartbeatService
from clusterd.model.events import EventType
from clusterd.slurm.arrays import split_task_id
from clusterd.store.records import JobRecord
from clusterd.supervisor.events import EventBus, JobEvent
from clusterd.supervisor.journal import EventJournal


def _visible(ident: Identity, rec: JobRecord, job_ids: frozenset[str]) -> bool:
    if not ident.admin and rec.user != ident.user:
        return False
    return not job_ids or rec.job_id in job_ids


def _status(rec: JobRecord, asked: str, *, with_spec: bool = False) -> jobs_pb2.JobStatus:
    """The record as asked for: the whole job, or one array task for ``ID_TASK``."""
    _, task = split_task_id(asked)  # the manager has checked the id
    if task is None:
        return convert.job_status(rec, with_spec=with_spec)
    return convert.task_status(rec, task, with_spec=with_spec)


class JobServicer(jobs_pb2_grpc.JobServiceServicer):
    def __init__(
        self, manager: JobManager, bus: EventBus, heartbeats: HeartbeatService, journal: EventJournal | None = None
    ) -> None:
        """``journal``: the event log that resume tokens point into (None: resuming is refused)."""
        self._manager = manager
        self._bus = bus
        self._heartbeats = heartbeats
        self._journal = journal

    async def Heartbeat(
        self, request: jobs_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.HeartbeatResponse:
        return convert.heartbeat_response(await self._heartbeats.beat(convert.beat_claim(request)))

    async def SubmitJob(
        self, request: jobs_pb2.SubmitJobRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.SubmitJobResponse:
        rec, duplicate = await self._manager.submit(current_identity(), spec_from_proto(request.spec))
        return jobs_pb2.SubmitJobResponse(job=convert.job_status(rec), duplicate=duplicate)

    async def GetJob(
        self, request: jobs_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.GetJobResponse:
        rec = await self._manager.get(current_identity(), request.job_id)
        return jobs_pb2.GetJobResponse(job=_status(rec, request.job_id, with_spec=True))

    async def ListJobs(
        self, request: jobs_pb2.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.ListJobsResponse:
        states = frozenset(convert.job_state_from_proto(s) for s in request.states)
        records = await self._manager.list(
            current_identity(),
            user=request.user,
            include_finished=request.include_finished or bool(states),
            limit=request.limit,
            states=states,
        )
        return jobs_pb2.ListJobsResponse(jobs=[convert.job_status(r) for r in records])

    async def CancelJob(
        self, request: jobs_pb2.CancelJobRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.CancelJobResponse:
        rec = await self._manager.cancel(current_identity(), request.job_id)
        return jobs_pb2.CancelJobResponse(job=_status(rec, request.job_id))

    async def RequeueJob(
        self, request: jobs_pb2.RequeueJobRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.RequeueJobResponse:
        rec = await self._manager.requeue(current_identity(), request.job_id)
        return jobs_pb2.RequeueJobResponse(job=_status(rec, request.job_id))

    async def WatchJobs(
        self, request: jobs_pb2.WatchJobsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[jobs_pb2.JobEvent]:
        ident = current_identity()
        job_ids = self._manager.watch_ids(request.job_ids)
        after = await self._resume_position(request.resume_token)
        # The log's position before the snapshot is read: the SNAPSHOT events carry it, so a watch
        # that breaks before its first logged event resumes from there (at least once, never a gap).
        snapshot_at = (await self._journal.bounds())[1] if request.include_initial and self._journal else 0
        # Subscribe before the snapshot or the replay so no event between them and the live stream
        # is lost; an event both replayed and delivered live is sent once (by its log position).
        # Unsubscribe on every exit, including a snapshot that fails (unknown or foreign job id).
        # The bus caps watchers per user as well as in all.
        sub = self._bus.subscribe(lambda ev: _visible(ident, ev.record, job_ids), user=ident.user)
        try:
            if request.include_initial:
                if job_ids:
                    initial = [await self._manager.get(ident, j, with_spec=False) for j in sorted(job_ids)]
                else:
                    initial = await self._manager.list(ident, user="", include_finished=False, limit=0)
                for rec in initial:
                    yield convert.job_event(JobEvent(EventType.SNAPSHOT, rec, seq=snapshot_at))
            if after is not None and self._journal is not None:
                async for event in self._journal.replay(after):
                    after = event.seq
                    if _visible(ident, event.record, job_ids):
                        yield convert.job_event(event)
            async for event in sub:
                if after is not None and 0 < event.seq <= after:
                    continue  # replayed already
                yield convert.job_event(event)
        finally:
            self._bus.unsubscribe(sub)

    async def _resume_position(self, token: str) -> int | None:
        """The log position a resume token names; None for a fresh watch."""
        if not token:
            return None
        if not token.isdigit() or len(token) > 19:
            raise InvalidArgument("resume_token", "not a token this service gave out (JobEvent.resume_token)")
        if self._journal is None:
            raise FailedPrecondition("this service keeps no event log to resume from")
        after = int(token)
        oldest, newest = await self._journal.bounds()
        if oldest and after < oldest - 1:
            raise OutOfRange(
                f"resume_token {token} is older than the event log keeps (oldest {oldest}, "
                "ha.event_retention_seconds); watch again with include_initial"
            )
        if after > newest:
            raise OutOfRange(f"resume_token {token} is past the newest event ({newest})")
        return after
