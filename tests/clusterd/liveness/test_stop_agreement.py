"""Ranks without a process group stop at one step, agreed through clusterd's heartbeat replies.

Three real processes (numpy, no torch.distributed) share only the checkpoint directory and beat to
an in-process clusterd over FakeSlurm; the stop signal reaches them at different steps, or not at
all, and every rank saves the same step, so the final save commits.
"""

from __future__ import annotations

import asyncio
import re
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from clusterctl.checkpoint import CheckpointManager
from clusterctl.slurm_env import REQUEUE_EXIT_CODE
from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd.config import LivenessConfig
from clusterd.liveness import heartbeats
from clusterd.server import ClusterDaemon
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.types import JobState
from tests.support.heartbeat import child_env

from ..conftest import USER_A, auth, make_config

INTERVAL = 0.2

WORKER = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    from clusterctl.checkpoint import CheckpointConfig, CheckpointManager
    from clusterctl.slurm_env import RequeueOnSignal
    uri, signal_at, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    config = CheckpointConfig(commit_timeout=30, poll_initial=0.01, gc_on_commit=False)
    with CheckpointManager(uri, config=config) as ckpt:  # the job's runtime: heartbeats to clusterd
        assert ckpt.restore() is None
        weights = np.zeros(4)
        with RequeueOnSignal(hold_timeout=30) as stop:
            for step in range(100_000):
                weights += 1  # the training step
                time.sleep(pause)
                if step == signal_at:
                    os.kill(os.getpid(), signal.SIGUSR1)
                if stop.requested_at(step):
                    print(f"held {stop.held_step} stop {stop.stop_step} saved {step}", flush=True)
                    stop.checkpoint_and_exit(ckpt, step, {"step": step, "weights": weights, "rank": ckpt.rank})
    sys.exit(3)  # never reached
""")


@dataclass
class Service:
    daemon: ClusterDaemon
    slurm: FakeSlurm
    jobs: jobs_pb2_grpc.JobServiceStub

    async def submit(self, **spec: object) -> tuple[str, int, str]:
        """A job with fast heartbeats, RUNNING on node1 (an array stays pending); (job id, record id, token)."""
        policy = jobs_pb2.RestartPolicy(heartbeat_interval=Duration(nanos=int(INTERVAL * 1e9)))
        request = jobs_pb2.SubmitJobRequest(spec=jobs_pb2.JobSpec(command=["train"], restart_policy=policy, **spec))  # type: ignore[arg-type]
        job_id = (await self.jobs.SubmitJob(request, metadata=auth(USER_A))).job.job_id
        script = self.slurm.submitted[-1].script
        token = re.search(r"CLUSTERCTL_HEARTBEAT_TOKEN=(\S+?);", script)
        record = re.search(r"CLUSTERCTL_RECORD_ID=(\d+);", script)
        assert token and record, script
        if "array" not in spec:
            self.slurm.set_state(job_id, JobState.RUNNING, nodes=("node1",))
        await self.daemon.poller.poll_once()
        return job_id, int(record.group(1)), token.group(1).strip("'")

    async def beat(
        self, job: tuple[str, int, str], rank: int, *, world: int = 3, node: str = "node1", **fields: object
    ) -> jobs_pb2.HeartbeatResponse:
        job_id, record, token = job
        request = jobs_pb2.HeartbeatRequest(record_id=record, token=token, job_id=job_id, rank=rank, world_size=world)
        request.node = node
        for name, value in fields.items():
            setattr(request, name, value)
        return await self.jobs.Heartbeat(request)


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Service]:
    """An in-process clusterd over FakeSlurm, reachable over loopback TCP."""
    slurm = FakeSlurm.cluster()
    config = replace(
        make_config(tmp_path), liveness=LivenessConfig(heartbeat_addr="unix:/run/test.sock", check_every_seconds=3600)
    )  # the jobs here dial the daemon's TCP port instead (known once it listens)
    daemon = ClusterDaemon(config, backend=slurm)
    await daemon.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}")
    try:
        yield Service(daemon, slurm, jobs_pb2_grpc.JobServiceStub(channel))
    finally:
        await channel.close()
        await daemon.stop()


def stop_of(reply: jobs_pb2.HeartbeatResponse) -> tuple[bool, int | None]:
    return reply.stopping, reply.stop_step if reply.HasField("stop_step") else None


async def test_the_stop_step_is_the_highest_held_once_every_rank_holds(service: Service) -> None:
    job = await service.submit()
    assert stop_of(await service.beat(job, 0, step=3)) == (False, None)
    assert stop_of(await service.beat(job, 1, step=9, stopping_step=9)) == (True, None)
    assert stop_of(await service.beat(job, 0, step=4)) == (True, None)  # told to hold: a stop is under way
    assert stop_of(await service.beat(job, 0, step=4, stopping_step=4)) == (True, None)
    assert stop_of(await service.beat(job, 2, step=0, stopping_step=0)) == (True, 9)  # step 0 is a step
    assert stop_of(await service.beat(job, 2, step=12, stopping_step=12)) == (True, 9)  # decided: it stands
    assert stop_of(await service.beat(job, 0, step=5)) == (True, 9)


async def test_a_claim_steers_only_its_own_job_and_is_checked_like_a_beat(service: Service) -> None:
    mine, theirs = await service.submit(), await service.submit()
    await service.beat(mine, 0, stopping_step=5)
    assert stop_of(await service.beat(theirs, 0, step=5)) == (False, None)
    with pytest.raises(grpc.aio.AioRpcError) as err:  # my token, their job
        await service.beat((theirs[0], mine[1], mine[2]), 0, stopping_step=5)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as err:  # their record, my token
        await service.beat((theirs[0], theirs[1], mine[2]), 0, stopping_step=5)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await service.beat(mine, 1, stopping_step=-1)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "stopping_step" in (err.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as err:  # beyond the allocation's CPUs (4 on node1)
        await service.beat(mine, 5, world=6, stopping_step=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert stop_of(await service.beat(theirs, 1, step=5)) == (False, None)


async def test_claims_are_rate_limited_like_beats(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeats, "_bucket_clock", lambda: 0.0)  # no refill, however slow the host's beats
    job = await service.submit()
    codes = set()
    for step in range(200):
        try:
            await service.beat(job, 0, step=step, stopping_step=step)
        except grpc.aio.AioRpcError as err:
            codes.add(err.code())
    assert codes == {grpc.StatusCode.RESOURCE_EXHAUSTED}


async def test_a_stop_under_way_continues_after_the_poll_for_the_ranks_the_run_knows(service: Service) -> None:
    """SIGTERM of a preemption comes with the requeue: the ranks still agree on their stop."""
    job = await service.submit()
    for rank in (0, 1):
        await service.beat(job, rank, world=3, step=7)
    await service.beat(job, 0, world=3, stopping_step=7)
    service.slurm.set_state(job[0], JobState.PENDING, nodes=(), restart_count=1)
    await service.daemon.poller.poll_once()
    assert stop_of(await service.beat(job, 2, world=3, stopping_step=3)) == (False, None)  # never beat: not taken
    assert stop_of(await service.beat(job, 1, world=3, node="node2", stopping_step=3)) == (False, None)
    assert stop_of(await service.beat(job, 1, world=3, restart_count=2, stopping_step=3)) == (False, None)
    assert stop_of(await service.beat(job, 1, world=3, stopping_step=8)) == (True, None)  # rank 2 never held
    run = service.daemon.liveness.get(job[1], job[0])
    assert run is not None and run.stop.held == {0: 7, 1: 8} and run.ranks[1].step == 7  # the claim only


async def test_a_stop_with_every_rank_known_is_decided_after_the_poll(service: Service) -> None:
    job = await service.submit()
    for rank in (0, 1):
        await service.beat(job, rank, world=2, step=7)
    await service.beat(job, 0, world=2, stopping_step=7)
    service.slurm.set_state(job[0], JobState.COMPLETING)
    await service.daemon.poller.poll_once()
    assert stop_of(await service.beat(job, 0, world=2)) == (True, None)
    assert stop_of(await service.beat(job, 1, world=2, stopping_step=8)) == (True, 8)
    assert stop_of(await service.beat(job, 0, world=2)) == (True, 8)


async def test_array_tasks_keep_runs_and_stops_of_their_own(service: Service) -> None:
    array, record, token = await service.submit(array="0-2")
    first = service.slurm.start_task(array, 0, nodes=("node1",))
    second = service.slurm.start_task(array, 1, nodes=("node2",))
    await service.daemon.poller.poll_once()
    task0, task1 = (first, record, token), (second, record, token)
    await service.beat(task0, 0, world=1, step=4)
    await service.beat(task1, 0, world=1, node="node2", step=9)
    assert stop_of(await service.beat(task0, 0, world=1, step=4, stopping_step=4)) == (True, 4)
    assert stop_of(await service.beat(task1, 0, world=1, node="node2", step=10)) == (False, None)
    runs = [service.daemon.liveness.get(record, task) for task in (first, second)]
    assert [r.ranks[0].step if r else None for r in runs] == [4, 10]


@pytest.mark.slow  # three processes for seconds
async def test_ranks_signalled_at_different_steps_or_not_at_all_save_one_step(service: Service, tmp_path: Path) -> None:
    uri, world = str(tmp_path / "ckpt"), 3
    job_id, record, token = await service.submit(nodes=1)
    env = {
        "CLUSTERCTL_HEARTBEAT_ADDR": f"127.0.0.1:{service.daemon.port}",
        "CLUSTERCTL_HEARTBEAT_TOKEN": token,
        "CLUSTERCTL_RECORD_ID": str(record),
        "CLUSTERCTL_HEARTBEAT_INTERVAL": f"{INTERVAL}",
        "SLURM_JOB_ID": job_id,
        "SLURM_RESTART_COUNT": "0",
        "SLURMD_NODENAME": "node1",
    }
    # (signalled at step, seconds per step): the ranks train at different speeds, and rank 2 never
    # gets the signal; it hears of the stop from clusterd.
    ranks = [(12, 0.02), (30, 0.01), (-1, 0.005)]
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WORKER,
            uri,
            str(signal_at),
            str(pause),
            env=child_env({**env, "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world)}),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for rank, (signal_at, pause) in enumerate(ranks)
    ]
    outputs = [await asyncio.wait_for(p.communicate(), 120) for p in procs]
    reports = []
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == REQUEUE_EXIT_CODE, err.decode()[-3000:]
        found = re.search(r"held (\d+) stop (\d+) saved (\d+)", out.decode())
        assert found, out.decode() + err.decode()[-3000:]
        reports.append(tuple(int(g) for g in found.groups()))
    held = [h for h, _, _ in reports]
    stop_step = max(held)
    assert all(stop == saved == stop_step for _, stop, saved in reports), reports
    assert held[0] <= 12 and held[1] <= 30  # a rank holds at its signal, or earlier when it hears of another's
    run = service.daemon.liveness.get(record, job_id)
    assert run is not None and run.stop.step == stop_step and run.stop.held == dict(enumerate(held))
    for rank in range(world):
        with CheckpointManager(uri, rank=rank, world_size=world) as ckpt:
            assert ckpt.steps() == [stop_step]  # committed: every rank wrote that step
            state = ckpt.restore()
        assert state["step"] == stop_step and state["rank"] == rank
        assert state["weights"].tolist() == [stop_step + 1.0] * 4
