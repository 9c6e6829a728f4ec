"""JobService's read-and-control views (logs, history, hold/release, the queue, adopt, checkpoints).

A subclass of the JobServicer rather than more methods in it, so the two grow apart cleanly: every
method here takes the caller from the interceptor and calls :class:`clusterd.api.views.JobViews`,
which the web API calls too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from clusterctl.v1 import jobs_pb2
from clusterd.api.jobs_servicer import JobServicer
from clusterd.api.views import JobViews
from clusterd.auth.identity import current_identity


class ViewsJobServicer(JobServicer):
    def __init__(self, *args: Any, views: JobViews, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._views = views

    async def GetJob(
        self, request: jobs_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.GetJobResponse:
        return await self._views.get_job(current_identity(), request.job_id)  # with what the ranks' beats say

    async def ReadJobLog(
        self, request: jobs_pb2.ReadJobLogRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[jobs_pb2.JobLogChunk]:
        async for chunk in self._views.read_log(current_identity(), request):
            yield chunk

    async def ListHistory(
        self, request: jobs_pb2.ListHistoryRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.ListHistoryResponse:
        return await self._views.list_history(current_identity(), request)

    async def GetGoodput(
        self, request: jobs_pb2.GetGoodputRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.GetGoodputResponse:
        return await self._views.goodput(current_identity(), request.job_id)

    async def HoldJob(
        self, request: jobs_pb2.HoldJobRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.HoldJobResponse:
        return jobs_pb2.HoldJobResponse(job=await self._views.hold(current_identity(), request.job_id, release=False))

    async def ReleaseJob(
        self, request: jobs_pb2.ReleaseJobRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.ReleaseJobResponse:
        return jobs_pb2.ReleaseJobResponse(job=await self._views.hold(current_identity(), request.job_id, release=True))

    async def ListQueue(
        self, request: jobs_pb2.ListQueueRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.ListQueueResponse:
        return await self._views.list_queue(current_identity(), request)

    async def AdoptJob(
        self, request: jobs_pb2.AdoptJobRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.AdoptJobResponse:
        return await self._views.adopt(current_identity(), request)

    async def ListJobCheckpoints(
        self, request: jobs_pb2.ListJobCheckpointsRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.ListJobCheckpointsResponse:
        return await self._views.checkpoints(current_identity(), request)
