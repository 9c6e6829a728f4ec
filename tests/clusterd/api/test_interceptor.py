"""The interceptor on its own: it authenticates, rate-limits, binds the caller, records, maps errors.

A minimal JobService stands behind it, so these tests see exactly what a handler is given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd.api.interceptor import AuthInterceptor
from clusterd.auth.identity import current_identity
from clusterd.auth.tokens import TokenStore
from clusterd.errors import NotFound
from clusterd.security import audit
from clusterd.security.limits import RateLimiter

from ..conftest import ADMIN, USER_A, USER_B, auth, write_tokens


class Probe(jobs_pb2_grpc.JobServiceServicer):
    """Answers with who called and from where; job id "404" raises NotFound."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, audit.Origin | None]] = []

    async def GetJob(self, request: jobs_pb2.GetJobRequest, context: Any) -> jobs_pb2.GetJobResponse:
        ident = current_identity()
        self.seen.append((ident.user, ident.admin, audit._origin.get()))
        if request.job_id == "404":
            raise NotFound("no job 404")
        return jobs_pb2.GetJobResponse(job=jobs_pb2.JobStatus(user=ident.user))

    async def WatchJobs(self, request: jobs_pb2.WatchJobsRequest, context: Any) -> AsyncIterator[jobs_pb2.JobEvent]:
        ident = current_identity()
        yield jobs_pb2.JobEvent(job=jobs_pb2.JobStatus(user=ident.user))
        raise NotFound("stream over")


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[jobs_pb2_grpc.JobServiceStub, Probe]]:
    tokens = tmp_path / "tokens.toml"
    write_tokens(tokens)
    probe = Probe()
    server = grpc.aio.server(interceptors=[AuthInterceptor(TokenStore(tokens), limiter=RateLimiter(0.001, 3))])
    jobs_pb2_grpc.add_JobServiceServicer_to_server(probe, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield jobs_pb2_grpc.JobServiceStub(channel), probe
    await server.stop(None)


async def code(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_unauthenticated_calls_never_reach_the_handler(served: tuple[Any, Probe]) -> None:
    jobs, probe = served
    get = jobs_pb2.GetJobRequest(job_id="1")
    assert await code(jobs.GetJob(get)) == grpc.StatusCode.UNAUTHENTICATED
    assert await code(jobs.GetJob(get, metadata=[("authorization", "Bearer wrong")])) == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    assert await code(jobs.WatchJobs(jobs_pb2.WatchJobsRequest()).read()) == grpc.StatusCode.UNAUTHENTICATED
    assert probe.seen == []


async def test_the_handler_gets_the_caller_and_its_origin(served: tuple[Any, Probe]) -> None:
    jobs, probe = served
    call = jobs.GetJob(jobs_pb2.GetJobRequest(job_id="1"), metadata=[*auth(ADMIN), ("x-request-id", "abc-1")])
    assert (await call).job.user == ADMIN
    assert ("x-request-id", "abc-1") in tuple(await call.trailing_metadata())
    user, admin, origin = probe.seen[0]
    assert (user, admin) == (ADMIN, True)
    assert origin is not None and origin.auth == "token" and origin.call_request_id == "abc-1"
    assert origin.peer.startswith("ipv4:127.0.0.1:")


async def test_service_errors_become_one_status_in_unary_and_streams(served: tuple[Any, Probe]) -> None:
    jobs, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await jobs.GetJob(jobs_pb2.GetJobRequest(job_id="404"), metadata=auth(USER_A))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and info.value.details() == "no job 404"
    stream = jobs.WatchJobs(jobs_pb2.WatchJobsRequest(), metadata=auth(USER_A))
    assert (await stream.read()).job.user == USER_A
    assert await code(stream.read()) == grpc.StatusCode.NOT_FOUND


async def test_the_request_rate_is_per_user(served: tuple[Any, Probe]) -> None:
    jobs, probe = served
    get = jobs_pb2.GetJobRequest(job_id="1")
    for _ in range(3):
        await jobs.GetJob(get, metadata=auth(USER_A))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await jobs.GetJob(get, metadata=auth(USER_A))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "rate limit" in (info.value.details() or "")
    assert await code(jobs.WatchJobs(jobs_pb2.WatchJobsRequest(), metadata=auth(USER_A)).read()) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    await jobs.GetJob(get, metadata=auth(USER_B))
    assert len(probe.seen) == 4
