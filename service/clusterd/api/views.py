"""What a caller may see of jobs, as proto responses: shared by the gRPC servicer and the web API.

Each method takes the authenticated identity and a request message, calls the domain and maps
the result to the response message, so ``clusterctl history --json`` and ``GET /api/history``
carry the same data in the same shape. Domain errors pass through (ServiceError subclasses);
each edge maps them its own way (gRPC status, HTTP status).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.api import convert
from clusterd.api.cluster_servicer import topology_proto
from clusterd.auth.identity import Identity
from clusterd.config import ViewsConfig
from clusterd.errors import InvalidArgument
from clusterd.goodput.fleet import summarize
from clusterd.goodput.report import GoodputReporter
from clusterd.jobs.checkpoints import CheckpointViews
from clusterd.jobs.history import Finished, History, HistoryQuery
from clusterd.jobs.logs import JobLogs
from clusterd.jobs.manager import JobManager, check_job_id
from clusterd.jobs.queue import queue_rows
from clusterd.placement import TopologyPlacer
from clusterd.slurm.arrays import split_task_id
from clusterd.store.records import JobRecord
from clusterd.supervisor.cache import QueueCache


def _ts(value: float | None) -> Timestamp | None:
    if not value:
        return None
    ts = Timestamp()
    ts.FromNanoseconds(int(value * 1e9))
    return ts


def _set_ts(msg: object, name: str, value: float | None) -> None:
    ts = _ts(value)
    if ts is not None:
        getattr(msg, name).CopyFrom(ts)


def _seconds(ts: Timestamp, field: str) -> float | None:
    if not ts.seconds and not ts.nanos:
        return None
    if ts.seconds < 0:
        raise InvalidArgument(field, "must be after 1970")
    return ts.seconds + ts.nanos / 1e9


def status_of(rec: JobRecord, asked: str, *, with_spec: bool = False) -> jobs_pb2.JobStatus:
    """The record as asked for: the whole job, or one array task for ``ID_TASK``."""
    _, task = split_task_id(asked)
    return (
        convert.job_status(rec, with_spec=with_spec)
        if task is None
        else convert.task_status(rec, task, with_spec=with_spec)
    )


def history_entry(row: Finished) -> jobs_pb2.HistoryEntry:
    if row.record is not None:
        rec = row.record
        msg = jobs_pb2.HistoryEntry(
            job_id=rec.job_id,
            name=rec.name or rec.spec.name,
            user=rec.user,
            state=convert.job_state(rec.state),
            exit_code=rec.exit_code,
            exit_signal=rec.exit_signal,
            has_exit_code=not (rec.array and not rec.array_tasks),
            restart_count=rec.restart_count,
            nodes=list(rec.nodes),
            partition=rec.partition,
            final_reason=rec.final_reason,
            source="clusterd",
        )
        start, end, submit = rec.start_time, rec.end_time, rec.submit_time
    else:
        job = row.accounted
        assert job is not None
        msg = jobs_pb2.HistoryEntry(
            job_id=job.display_id,
            name=job.name,
            user=job.user,
            state=convert.job_state(job.state),
            exit_code=job.exit_code,
            exit_signal=job.exit_signal,
            has_exit_code=True,
            restart_count=job.restart_count,
            nodes=list(job.nodes),
            partition=job.partition,
            source="slurmdbd",
        )
        start, end, submit = job.start_time, job.end_time, job.submit_time
    _set_ts(msg, "submit_time", submit)
    _set_ts(msg, "start_time", start)
    _set_ts(msg, "end_time", end)
    if start and end and end >= start:
        msg.elapsed.CopyFrom(Duration(seconds=int(end - start)))
    return msg


class JobViews:
    def __init__(
        self,
        manager: JobManager,
        logs: JobLogs,
        history: History,
        checkpoints: CheckpointViews,
        cache: QueueCache,
        placer: TopologyPlacer,
        views: ViewsConfig,
        *,
        goodput: GoodputReporter | None = None,
    ) -> None:
        """``goodput``: the live runs' side of goodput (None: the records' alone)."""
        self._goodput = goodput or GoodputReporter(None, None)
        self.manager = manager
        self._logs = logs
        self._history = history
        self._checkpoints = checkpoints
        self._cache = cache
        self._placer = placer
        self._views = views
        # squeue's PrivateData=jobs, as the cluster's configuration says (clusterd sets it at start;
        # until then, and when it could not be read, each user sees only their own jobs).
        self.slurm_private_jobs = True
        # A record's straggler nodes as its running ranks' step times name them (node -> ratio);
        # the liveness table's, set by the daemon (only the leader's knows: others answer none).
        self.stragglers: Callable[[int], dict[str, float]] = lambda record_id: {}

    # -- the records (what GetJob/ListJobs answer; the web API reads them here too) ------------

    async def get_job(self, ident: Identity, job_id: str) -> jobs_pb2.GetJobResponse:
        rec = await self.manager.get(ident, job_id)
        job = status_of(rec, job_id, with_spec=True)
        for node, ratio in sorted(self.stragglers(rec.record_id).items()):
            job.stragglers.add(node=node, ratio=ratio)
        return jobs_pb2.GetJobResponse(job=job)

    async def list_jobs(self, ident: Identity, request: jobs_pb2.ListJobsRequest) -> jobs_pb2.ListJobsResponse:
        states = frozenset(convert.job_state_from_proto(s) for s in request.states)
        records = await self.manager.list(
            ident,
            user=request.user,
            limit=request.limit,
            states=states,
            include_finished=request.include_finished or bool(states),
        )
        return jobs_pb2.ListJobsResponse(jobs=[convert.job_status(r) for r in records])

    async def goodput(self, ident: Identity, job_id: str) -> jobs_pb2.GetGoodputResponse:
        """Where the job's wall time went; whoever may GetJob it may ask (the same lookup)."""
        rec = await self.manager.get(ident, job_id)  # checks the id and who may see the job
        task = split_task_id(job_id)[1]
        if task is not None or rec.array:
            # An array's tasks run, fail and restart one by one, but the record keeps one timeline
            # (its start, first step, restarts' phases): its tasks' parts cannot be told apart.
            what = f"array task {job_id}" if task is not None else f"job {rec.job_id}, an array (--array={rec.array}),"
            raise InvalidArgument("job_id", f"goodput is kept for plain jobs only: {what} has no timeline of its own")
        return convert.goodput_response(rec.job_id, self._goodput.report(rec))

    async def fleet_goodput(self, ident: Identity) -> dict[str, Any]:
        """Goodput per partition and user over the jobs the caller may list (an admin: everyone's),
        live and recently finished, as the dashboard's fleet panel shows it."""
        records = await self.manager.list(ident, user="*" if ident.admin else "", include_finished=True, limit=0)
        jobs = [(r.partition, r.user, self._goodput.report(r).goodput) for r in records if not r.array]
        return {
            "rows": [
                {
                    "partition": row.partition,
                    "user": row.user,
                    "jobs": row.jobs,
                    "ettr": row.ettr,
                    "wall_seconds": row.wall_seconds,
                    "breakdown": row.breakdown,
                }
                for row in summarize(jobs)
            ]
        }

    def topology(self) -> cluster_pb2.GetTopologyResponse:
        return cluster_pb2.GetTopologyResponse(topology=topology_proto(self._placer.model()))

    # -- the new views ------------------------------------------------------------------------

    async def read_log(
        self, ident: Identity, request: jobs_pb2.ReadJobLogRequest
    ) -> AsyncIterator[jobs_pb2.JobLogChunk]:
        stderr = request.stream == jobs_pb2.LOG_STREAM_STDERR
        chunks = self._logs.read(
            ident, request.job_id, stderr=stderr, tail_lines=request.tail_lines, follow=request.follow
        )
        async for c in chunks:
            yield jobs_pb2.JobLogChunk(
                data=c.data,
                path=c.path,
                offset=c.offset,
                notice=c.notice,
                state=convert.job_state(c.state),
                restart_count=c.restart_count,
            )

    async def list_history(self, ident: Identity, request: jobs_pb2.ListHistoryRequest) -> jobs_pb2.ListHistoryResponse:
        query = HistoryQuery(
            user=request.user,
            states=frozenset(convert.job_state_from_proto(s) for s in request.states),
            name=request.name,
            since=_seconds(request.since, "since"),
            until=_seconds(request.until, "until"),
            limit=request.limit,
        )
        result = await self._history.find(ident, query)
        return jobs_pb2.ListHistoryResponse(
            jobs=[history_entry(r) for r in result.jobs], accounting=result.accounting, accounting_note=result.note
        )

    async def hold(self, ident: Identity, job_id: str, *, release: bool) -> jobs_pb2.JobStatus:
        rec = await (self.manager.release if release else self.manager.hold)(ident, job_id)
        return status_of(rec, job_id)

    async def list_queue(self, ident: Identity, request: jobs_pb2.ListQueueRequest) -> jobs_pb2.ListQueueResponse:
        snapshot = self._cache.snapshot
        mine = await self.manager.list(ident, user="", include_finished=False, limit=0)
        public = self._views.public_queue and not self.slurm_private_jobs
        rows = queue_rows(
            snapshot,
            ident,
            public=public,
            partition=request.partition,
            supervised=frozenset(r.job_id for r in mine),
            states=frozenset(convert.job_state_from_proto(s) for s in request.states),
        )
        out = jobs_pb2.ListQueueResponse()
        for r in rows:
            entry = out.jobs.add(
                job_id=r.job_id,
                partition=r.partition,
                name=r.name,
                user=r.user,
                state=convert.job_state(r.state),
                reason=r.reason,
                nodes=list(r.nodes),
                mine=r.mine,
                supervised=r.supervised,
            )
            _set_ts(entry, "submit_time", r.submit_time)
            _set_ts(entry, "start_time", r.start_time)
            _set_ts(entry, "end_time", r.end_time)
        _set_ts(out, "as_of", snapshot.time)
        return out

    async def adopt(self, ident: Identity, request: jobs_pb2.AdoptJobRequest) -> jobs_pb2.AdoptJobResponse:
        rec, already = await self.manager.adopt(ident, request.job_id, request.checkpoint_uri)
        return jobs_pb2.AdoptJobResponse(job=convert.job_status(rec), already=already)

    async def checkpoints(
        self, ident: Identity, request: jobs_pb2.ListJobCheckpointsRequest
    ) -> jobs_pb2.ListJobCheckpointsResponse:
        check_job_id(request.job_id)
        listing = await self._checkpoints.list(ident, request.job_id)
        out = jobs_pb2.ListJobCheckpointsResponse(uri=listing.uri, error=listing.error)
        for s in listing.steps:
            info = out.checkpoints.add(
                step=s.step, bytes=s.bytes, world_size=s.world_size, verification=s.verification, detail=s.detail
            )
            _set_ts(info, "committed_at", s.committed_at)
        return out
