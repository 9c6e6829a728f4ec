"""Per-user limits: request rate (token bucket) and queued jobs, both RESOURCE_EXHAUSTED."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from clusterctl.v1 import jobs_pb2
from clusterd.errors import ResourceExhausted
from clusterd.security.limits import RateLimiter
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.types import JobState

from .conftest import USER_A, auth, base_config, code_of, command_request, running, stub

USER_B = "daemon"


def test_token_bucket() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: now[0])
    for _ in range(3):
        limiter.check("a")
    with pytest.raises(ResourceExhausted, match=r"retry in 0\.50s"):
        limiter.check("a")
    limiter.check("b")  # buckets are per user
    now[0] += 0.5
    limiter.check("a")
    with pytest.raises(ResourceExhausted):
        limiter.check("a")
    now[0] += 100.0
    for _ in range(3):  # refills up to the burst, no further
        limiter.check("a")
    with pytest.raises(ResourceExhausted):
        limiter.check("a")
    RateLimiter(rate=0, burst=1).check("a")  # 0 = off


async def test_request_rate_is_limited_per_user(tmp_path: Path) -> None:
    cfg = base_config(tmp_path, requests_per_second=0.01, burst=5)
    async with running(cfg) as daemon, grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
        jobs = stub(ch)
        for _ in range(5):
            await jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_A))
        assert await code_of(jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_A))) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED)
        watch = jobs.WatchJobs(jobs_pb2.WatchJobsRequest(), metadata=auth(USER_A))
        assert await code_of(watch.read()) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await code_of(jobs.SubmitJob(command_request(), metadata=auth(USER_A))) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED)
        await jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_B))  # another user's bucket


async def test_queued_jobs_per_user(tmp_path: Path) -> None:
    slurm = FakeSlurm.cluster()
    async with running(base_config(tmp_path, max_jobs_per_user=2), slurm) as daemon, \
            grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:  # fmt: skip
        jobs = stub(ch)
        first = await jobs.SubmitJob(command_request(request_id="r1"), metadata=auth(USER_A))
        await jobs.SubmitJob(command_request(request_id="r2"), metadata=auth(USER_A))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await jobs.SubmitJob(command_request(request_id="r3"), metadata=auth(USER_A))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "limit is 2" in (info.value.details() or "")
        assert slurm.calls["submit"] == 2
        again = await jobs.SubmitJob(command_request(request_id="r1"), metadata=auth(USER_A))
        assert again.duplicate and again.job.job_id == first.job.job_id  # a retry is not a new job
        await jobs.SubmitJob(command_request(), metadata=auth(USER_B))
        slurm.set_state(first.job.job_id, JobState.COMPLETED)
        await daemon.poller.poll_once()
        await jobs.SubmitJob(command_request(request_id="r4"), metadata=auth(USER_A))  # room again
        assert slurm.calls["submit"] == 4


async def test_concurrent_submits_never_exceed_the_cap(tmp_path: Path) -> None:
    slurm = FakeSlurm.cluster()
    async with running(base_config(tmp_path, max_jobs_per_user=3), slurm) as daemon, \
            grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:  # fmt: skip
        jobs = stub(ch)
        codes = await asyncio.gather(*(code_of(jobs.SubmitJob(command_request(request_id=f"c{i}"),
                                                              metadata=auth(USER_A))) for i in range(12)))
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert 1 <= codes.count(grpc.StatusCode.OK) <= 3
        assert slurm.calls["submit"] == codes.count(grpc.StatusCode.OK)
        listed = await jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_A))
        assert len(listed.jobs) <= 3
