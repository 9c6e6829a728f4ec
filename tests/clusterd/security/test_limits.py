"""Per-user limits: request rate (token bucket), queued tasks, watch streams, retention; RESOURCE_EXHAUSTED."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from clusterctl.v1 import jobs_pb2
from clusterd.config import LimitsConfig
from clusterd.errors import ResourceExhausted
from clusterd.model.spec import JobSpec
from clusterd.security.limits import Quotas, RateLimiter
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.types import JobState
from clusterd.store.records import Phase
from clusterd.store.store import sqlite_store

from ..conftest import USER_A, auth, base_config, code_of, command_request, running, stub

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
            grpc.StatusCode.RESOURCE_EXHAUSTED
        )
        watch = jobs.WatchJobs(jobs_pb2.WatchJobsRequest(), metadata=auth(USER_A))
        assert await code_of(watch.read()) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await code_of(jobs.SubmitJob(command_request(), metadata=auth(USER_A))) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED
        )
        await jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_B))  # another user's bucket


async def test_queued_jobs_per_user(tmp_path: Path) -> None:
    slurm = FakeSlurm.cluster()
    async with (
        running(base_config(tmp_path, max_jobs_per_user=2), slurm) as daemon,
        grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch,
    ):
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
    async with (
        running(base_config(tmp_path, max_jobs_per_user=3), slurm) as daemon,
        grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch,
    ):
        jobs = stub(ch)
        codes = await asyncio.gather(
            *(code_of(jobs.SubmitJob(command_request(request_id=f"c{i}"), metadata=auth(USER_A))) for i in range(12))
        )
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert 1 <= codes.count(grpc.StatusCode.OK) <= 3
        assert slurm.calls["submit"] == codes.count(grpc.StatusCode.OK)
        listed = await jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_A))
        assert len(listed.jobs) <= 3


async def test_one_user_cannot_take_every_watch_slot(tmp_path: Path) -> None:
    async with (
        running(base_config(tmp_path, max_watchers=3, max_watchers_per_user=2)) as daemon,
        grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch,
    ):
        jobs = stub(ch)
        for user in (USER_A, USER_B):
            await jobs.SubmitJob(command_request(), metadata=auth(user))
        streams = []
        for _ in range(2):  # each stream is admitted once its snapshot arrives
            stream = jobs.WatchJobs(jobs_pb2.WatchJobsRequest(include_initial=True), metadata=auth(USER_A))
            await stream.read()
            streams.append(stream)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await jobs.WatchJobs(jobs_pb2.WatchJobsRequest(include_initial=True), metadata=auth(USER_A)).read()
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "limits.max_watchers_per_user" in (info.value.details() or "")
        theirs = jobs.WatchJobs(jobs_pb2.WatchJobsRequest(include_initial=True), metadata=auth(USER_B))
        assert (await theirs.read()).job.user == USER_B  # the other user still gets a slot
        streams[0].cancel()
        await wait_until(lambda: daemon.bus.watchers_of(USER_A) == 1)
        again = jobs.WatchJobs(jobs_pb2.WatchJobsRequest(include_initial=True), metadata=auth(USER_A))
        assert (await again.read()).job.user == USER_A  # a closed stream frees its slot


async def test_quotas_count_array_tasks_and_prune_by_age(tmp_path: Path) -> None:
    now = [1000.0]
    opened = sqlite_store(tmp_path / "db.sqlite3")
    await opened.open()
    store = opened.jobs
    try:
        quotas = Quotas(
            store, LimitsConfig(max_jobs_per_user=10, finished_retention_seconds=50.0), clock=lambda: now[0]
        )
        rec, _ = await quotas.reserve_submit(USER_A, JobSpec(command=["x"]), tasks=8)
        with pytest.raises(ResourceExhausted, match="this job adds 3; the limit is 10"):
            await quotas.reserve_submit(USER_A, JobSpec(command=["x"]), tasks=3)
        rec.phase, rec.job_id, rec.terminal = Phase.SUBMITTED, "1", True
        await store.save(rec)
        await quotas.reserve_submit(USER_A, JobSpec(command=["x"]), tasks=10)  # finished: room again
        assert await quotas.prune() == 0
        now[0] = time.time() + 100.0
        assert await quotas.prune() == 1 and await store.get_by_record(rec.record_id) is None
    finally:
        await opened.close()


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
