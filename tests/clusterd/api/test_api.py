"""JobService/ClusterService over real gRPC in-process, with FakeSlurm behind the seam."""

from __future__ import annotations

import asyncio
import gc
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.server import ClusterDaemon
from clusterd.slurm.types import JobState

from ..conftest import ADMIN, USER_A, USER_B, Harness, auth, make_config
from ..jobs.test_validate import BAD


def cmd(**kw: object) -> jobs_pb2.SubmitJobRequest:
    return jobs_pb2.SubmitJobRequest(spec=jobs_pb2.JobSpec(command=["hostname"], **kw))  # type: ignore[arg-type]


async def submit(h: Harness, user: str = USER_A, **kw: object) -> jobs_pb2.SubmitJobResponse:
    return await h.jobs.SubmitJob(cmd(**kw), metadata=auth(user))


async def code_of(coro: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await coro  # type: ignore[misc]
    return info.value.code()


# -- authentication and ownership ---------------------------------------------------------------


async def test_auth_matrix(harness: Harness) -> None:
    job = (await submit(harness)).job
    get = jobs_pb2.GetJobRequest(job_id=job.job_id)
    assert await code_of(harness.jobs.GetJob(get)) == grpc.StatusCode.UNAUTHENTICATED
    bad = [("authorization", "Bearer not-a-real-token-at-all")]
    assert await code_of(harness.jobs.GetJob(get, metadata=bad)) == grpc.StatusCode.UNAUTHENTICATED
    basic = [("authorization", "Basic dXNlcjpwYXNz")]
    assert await code_of(harness.jobs.GetJob(get, metadata=basic)) == grpc.StatusCode.UNAUTHENTICATED
    assert (await harness.jobs.GetJob(get, metadata=auth(USER_A))).job.user == USER_A
    assert await code_of(harness.jobs.GetJob(get, metadata=auth(USER_B))) == grpc.StatusCode.PERMISSION_DENIED
    cancel = jobs_pb2.CancelJobRequest(job_id=job.job_id)
    assert await code_of(harness.jobs.CancelJob(cancel, metadata=auth(USER_B))) == grpc.StatusCode.PERMISSION_DENIED
    requeue = jobs_pb2.RequeueJobRequest(job_id=job.job_id)
    assert await code_of(harness.jobs.RequeueJob(requeue, metadata=auth(USER_B))) == grpc.StatusCode.PERMISSION_DENIED
    assert harness.slurm.calls["cancel"] == 0 and harness.slurm.calls["requeue"] == 0
    assert (await harness.jobs.GetJob(get, metadata=auth(ADMIN))).job.job_id == job.job_id
    # Lists: own jobs only, admins may ask for everyone.
    await submit(harness, USER_B)
    own = await harness.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_B))
    assert {j.user for j in own.jobs} == {USER_B}
    everyone = await harness.jobs.ListJobs(jobs_pb2.ListJobsRequest(user="*"), metadata=auth(ADMIN))
    assert {j.user for j in everyone.jobs} == {USER_A, USER_B}
    other = harness.jobs.ListJobs(jobs_pb2.ListJobsRequest(user=USER_A), metadata=auth(USER_B))
    assert await code_of(other) == grpc.StatusCode.PERMISSION_DENIED
    assert (await harness.jobs.CancelJob(cancel, metadata=auth(ADMIN))).job.job_id == job.job_id


async def test_unknown_job_is_not_found(harness: Harness) -> None:
    get = harness.jobs.GetJob(jobs_pb2.GetJobRequest(job_id="999999"), metadata=auth(USER_A))
    assert await code_of(get) == grpc.StatusCode.NOT_FOUND
    bad = harness.jobs.GetJob(jobs_pb2.GetJobRequest(job_id="1; scancel -u root"), metadata=auth(USER_A))
    assert await code_of(bad) == grpc.StatusCode.INVALID_ARGUMENT


async def test_health_and_reflection_need_no_token(harness: Harness) -> None:
    stub = health_pb2_grpc.HealthStub(harness.channel)
    resp = await stub.Check(health_pb2.HealthCheckRequest(service="clusterctl.v1.JobService"))
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_tokens_reload_without_restart(harness: Harness, tmp_path: Path) -> None:
    tokens = Path(harness.daemon.config.tokens_file)
    tokens.write_text('[[token]]\nuser = "nobody"\ntoken = "a-brand-new-token-123"\n')
    import os
    import time

    os.utime(tokens, (time.time() + 5, time.time() + 5))
    await asyncio.to_thread(harness.daemon.tokens.maybe_reload)  # what its watcher does every tokens_reload_seconds
    new = [("authorization", "Bearer a-brand-new-token-123")]
    await harness.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=new)
    assert await code_of(harness.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_A))) == (
        grpc.StatusCode.UNAUTHENTICATED
    )


# -- validation never reaches Slurm --------------------------------------------------------------


@pytest.mark.parametrize(("case", "bad", "field"), BAD, ids=[c[0] for c in BAD])
async def test_rejected_requests_never_reach_slurm(
    harness: Harness, case: str, bad: jobs_pb2.JobSpec, field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await harness.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=bad), metadata=auth(USER_A))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (info.value.details() or "")
    assert harness.slurm.calls["submit"] == 0
    listed = await harness.jobs.ListJobs(jobs_pb2.ListJobsRequest(include_finished=True), metadata=auth(USER_A))
    assert not listed.jobs


async def test_oversized_request_is_refused(tmp_path: Path) -> None:
    from clusterd.slurm.fake import FakeSlurm

    daemon = ClusterDaemon(
        make_config(tmp_path, max_message_bytes=64 << 10, max_script_bytes=1 << 20), backend=FakeSlurm.cluster()
    )
    await daemon.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            from clusterctl.v1 import jobs_pb2_grpc

            stub = jobs_pb2_grpc.JobServiceStub(ch)
            big = jobs_pb2.SubmitJobRequest(spec=jobs_pb2.JobSpec(script="#!/bin/bash\n" + "#" * (200 << 10)))
            assert await code_of(stub.SubmitJob(big, metadata=auth(USER_A))) == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        await daemon.stop()


async def test_infeasible_request_is_refused_with_the_reason(harness: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await submit(harness, gpus_per_node=8)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.gpus_per_node" in (info.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await submit(harness, nodes=7)
    assert "spec.nodes" in (info.value.details() or "")
    assert harness.slurm.calls["submit"] == 0


# -- idempotent submission -----------------------------------------------------------------------


async def test_same_request_id_submits_once(harness: Harness) -> None:
    first = await submit(harness, request_id="run-42")
    second = await submit(harness, request_id="run-42")
    assert second.duplicate and not first.duplicate
    assert first.job.job_id == second.job.job_id
    assert harness.slurm.calls["submit"] == 1
    other_user = await submit(harness, USER_B, request_id="run-42")
    assert other_user.job.job_id != first.job.job_id


async def test_concurrent_retries_submit_once(harness: Harness) -> None:
    results = await asyncio.gather(*(submit(harness, request_id="burst") for _ in range(20)))
    assert len({r.job.job_id for r in results}) == 1
    assert sum(not r.duplicate for r in results) == 1
    assert harness.slurm.calls["submit"] == 1


async def test_failed_sbatch_leaves_no_record_and_retry_may_submit(harness: Harness) -> None:
    harness.slurm.fail_submit = "Batch job submission failed: Invalid account"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await submit(harness, request_id="r1")
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "Invalid account" in (info.value.details() or "")
    harness.slurm.fail_submit = ""
    ok = await submit(harness, request_id="r1")
    assert not ok.duplicate and ok.job.job_id


async def test_records_and_request_ids_survive_restart(tmp_path: Path) -> None:
    from clusterctl.v1 import jobs_pb2_grpc
    from clusterd.slurm.fake import FakeSlurm

    slurm = FakeSlurm.cluster()
    config = make_config(tmp_path)
    job_ids = []
    for _ in range(2):
        daemon = ClusterDaemon(config, backend=slurm)
        await daemon.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            stub = jobs_pb2_grpc.JobServiceStub(ch)
            resp = await stub.SubmitJob(cmd(request_id="survivor"), metadata=auth(USER_A))
            job_ids.append(resp.job.job_id)
            got = await stub.GetJob(jobs_pb2.GetJobRequest(job_id=resp.job.job_id), metadata=auth(USER_A))
            assert got.job.spec.request_id == "survivor"
        await daemon.stop()
    assert job_ids[0] == job_ids[1]
    assert slurm.calls["submit"] == 1


# -- one poll serves every watcher ---------------------------------------------------------------


async def test_hundred_watchers_cost_one_queue_query_per_poll(harness: Harness) -> None:
    job = (await submit(harness)).job
    for _ in range(200):  # the submit's own event delivered: the watchers start after it
        if harness.daemon.journal.idle:
            break
        await asyncio.sleep(0.01)
    received: list[list[jobs_pb2.JobEvent]] = [[] for _ in range(100)]

    async def watch(i: int) -> None:
        call = harness.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(), metadata=auth(USER_A))
        async for event in call:
            received[i].append(event)
            if event.job.terminal:
                return

    tasks = [asyncio.create_task(watch(i)) for i in range(100)]
    for _ in range(200):  # all subscribed (a loaded machine takes longer than an idle one)
        if harness.daemon.bus.subscriber_count == 100:
            break
        await asyncio.sleep(0.05)
    assert harness.daemon.bus.subscriber_count == 100
    before = harness.slurm.calls["list_jobs"]
    harness.slurm.set_state(job.job_id, JobState.RUNNING, nodes=("node1",))
    await harness.poll()
    harness.slurm.set_state(job.job_id, JobState.COMPLETED, nodes=("node1",))
    await harness.poll()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert harness.slurm.calls["list_jobs"] - before == 2
    for events in received:
        states = [e.job.state for e in events]
        assert states == [jobs_pb2.JOB_STATE_RUNNING, jobs_pb2.JOB_STATE_COMPLETED, jobs_pb2.JOB_STATE_COMPLETED]
        assert events[-1].type == jobs_pb2.JOB_EVENT_TYPE_FINISHED


async def test_watchers_see_only_their_own_jobs(harness: Harness) -> None:
    mine = (await submit(harness, USER_A)).job
    theirs = (await submit(harness, USER_B)).job
    call = harness.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(include_initial=True), metadata=auth(USER_B))
    first = await asyncio.wait_for(call.read(), 5)
    assert first.type == jobs_pb2.JOB_EVENT_TYPE_SNAPSHOT and first.job.job_id == theirs.job_id
    harness.slurm.set_state(mine.job_id, JobState.RUNNING)
    harness.slurm.set_state(theirs.job_id, JobState.RUNNING)
    await harness.poll()
    nxt = await asyncio.wait_for(call.read(), 5)
    assert nxt.job.job_id == theirs.job_id
    call.cancel()


async def test_cancel_reaches_slurm_and_marks_user_cancelled(harness: Harness) -> None:
    job = (await submit(harness)).job
    await harness.jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.job_id), metadata=auth(USER_A))
    await harness.poll()
    got = await harness.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job.job_id), metadata=auth(USER_A))
    assert got.job.state == jobs_pb2.JOB_STATE_CANCELLED and got.job.terminal
    rec = await harness.daemon.store.jobs.get_by_job_id(job.job_id)
    assert rec is not None and rec.user_cancelled


async def test_topology_and_plan(harness: Harness) -> None:
    topo = (await harness.cluster.GetTopology(cluster_pb2.GetTopologyRequest(), metadata=auth(USER_A))).topology
    assert {s.name for s in topo.switches} == {"leaf1", "leaf2", "spine"}
    assert sum(n.gpus_total for n in topo.nodes) == 24
    plan = await harness.cluster.PlanPlacement(
        cluster_pb2.PlanPlacementRequest(nodes=3, gpus_per_node=4), metadata=auth(USER_A)
    )
    assert plan.placement.feasible and len(plan.placement.switches) == 1
    nodes = await harness.cluster.ListNodes(cluster_pb2.ListNodesRequest(partition="batch"), metadata=auth(USER_A))
    assert len(nodes.nodes) == 6


async def test_a_watcher_that_leaves_ends_cancelled_without_an_error(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A watcher whose process dies mid-stream: its call ends CANCELLED, its slot is freed, nothing raises.

    (When grpc closes an abandoned stream's generator from the event loop's finalizer, in another
    context than the call's, resetting the call's context variables used to raise "was created in a
    different Context" and count the call as UNKNOWN; seen on the stack, the interceptor now tolerates it.)
    """
    from clusterd.observability.metrics import RPCS

    label = {"method": "JobService/WatchJobs", "code": "CANCELLED"}
    before = RPCS.labels(**label)._value.get()
    await submit(harness)
    await harness.poll()
    # A client process that reads one event and dies: its connection drops under the open stream.
    client = (
        "import grpc, os\n"
        "from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc\n"
        f"ch = grpc.insecure_channel('127.0.0.1:{harness.daemon.port}')\n"
        "call = jobs_pb2_grpc.JobServiceStub(ch).WatchJobs(jobs_pb2.WatchJobsRequest(include_initial=True),\n"
        f"    metadata={auth(USER_A)!r})\n"
        "next(call)\n"
        "os._exit(0)\n"
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", client)
    assert await asyncio.wait_for(proc.wait(), 60) == 0
    for _ in range(200):
        if harness.daemon.bus.subscriber_count == 0 and RPCS.labels(**label)._value.get() > before:
            break
        await asyncio.sleep(0.05)
    gc.collect()  # the abandoned generator is finalized here at the latest
    await asyncio.sleep(0.2)
    assert harness.daemon.bus.subscriber_count == 0
    assert RPCS.labels(**label)._value.get() == before + 1
    assert not [r for r in caplog.records if "different Context" in r.getMessage() or r.exc_info]
