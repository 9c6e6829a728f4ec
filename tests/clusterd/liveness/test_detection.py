"""Heartbeats -> detection -> restart, through the service with FakeSlurm and a stand-in prober."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd.config import LivenessConfig
from clusterd.errors import ResourceExhausted, SlurmError
from clusterd.goodput.publish import publish_once
from clusterd.liveness.probe import Reach
from clusterd.observability.metrics import REGISTRY
from clusterd.server import ClusterDaemon
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.types import JobState, NodeState, SlurmJob

from ..conftest import USER_A, USER_B, auth, make_config

INTERVAL, HANG = 0.1, 1.0


@dataclass
class Prober:
    dead: set[str] = field(default_factory=set)  # addresses whose slurmd refuses
    busy: set[str] = field(default_factory=set)  # addresses whose slurmd's port is silent, the host answering
    probes: list[str] = field(default_factory=list)

    async def probe(self, address: str, port: int) -> Reach:
        self.probes.append(address)
        return Reach.REFUSED if address in self.dead else Reach.BUSY if address in self.busy else Reach.ANSWERS


@dataclass
class Live:
    daemon: ClusterDaemon
    slurm: FakeSlurm
    jobs: jobs_pb2_grpc.JobServiceStub
    prober: Prober

    async def submit(self, user: str = USER_A, *, time_limit: str = "", **policy: object) -> tuple[str, int, str]:
        """A 2-node job with fast heartbeats, RUNNING on node1+node2; returns (job id, record id, token)."""
        rp = jobs_pb2.RestartPolicy(
            heartbeat_interval=Duration(nanos=int(INTERVAL * 1e9)), hang_timeout=Duration(seconds=int(HANG)), **policy
        )  # type: ignore[arg-type]
        spec = jobs_pb2.JobSpec(command=["train"], nodes=2, restart_policy=rp, time_limit=time_limit)
        job = (await self.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), metadata=auth(user))).job
        script = self.slurm.submitted[-1].script
        token = re.search(r"CLUSTERCTL_HEARTBEAT_TOKEN=(\S+?);", script)
        record = re.search(r"CLUSTERCTL_RECORD_ID=(\d+);", script)
        assert token and record, script
        self.slurm.set_state(job.job_id, JobState.RUNNING, nodes=("node1", "node2"), start_time=time.time())
        await self.daemon.poller.poll_once()
        return job.job_id, int(record.group(1)), token.group(1).strip("'")

    async def other_tenant_on(self, node: str) -> None:
        """Another user's job (without heartbeats) runs on ``node``."""
        self.slurm.jobs["9999"] = SlurmJob("9999", "theirs", "bob", JobState.RUNNING, nodes=(node,))
        await self.daemon.poller.poll_once()

    async def beat(
        self, job_id: str, record: int, token: str, rank: int, node: str = "", **fields: object
    ) -> jobs_pb2.HeartbeatResponse:
        req = jobs_pb2.HeartbeatRequest(
            record_id=record,
            token=token,
            job_id=job_id,
            rank=rank,
            world_size=2,
            node=node or f"node{rank + 1}",
            **fields,
        )  # type: ignore[arg-type]
        return await self.jobs.Heartbeat(req)

    async def status(self, job_id: str) -> jobs_pb2.JobStatus:
        await self.daemon.heartbeats.drain(5.0)  # a first step is noted beside its beat's reply
        return (await self.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=auth(USER_A))).job


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Live]:
    slurm = FakeSlurm.cluster()
    slurm.nodes = [replace(n, address=f"10.0.0.{i}", port=6818) for i, n in enumerate(slurm.nodes, 1)]
    config = replace(
        make_config(tmp_path), liveness=LivenessConfig(heartbeat_addr="unix:/run/test.sock", check_every_seconds=3600)
    )
    daemon = ClusterDaemon(config, backend=slurm)
    prober = Prober()
    daemon.detector._prober = prober  # the probe's verdict is the test's to give
    await daemon.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}")
    try:
        yield Live(daemon, slurm, jobs_pb2_grpc.JobServiceStub(channel), prober)
    finally:
        await channel.close()
        await daemon.stop()


async def beat_both_then_silence(live: Live, job_id: str, record: int, token: str, *, keep: int) -> None:
    """Both ranks beat; then only rank ``keep`` does, for longer than the suspect window."""
    for rank in (0, 1):
        await live.beat(job_id, record, token, rank, step=5, committed_step=4)
    for _ in range(4):
        await asyncio.sleep(INTERVAL)
        await live.beat(job_id, record, token, keep, step=6)


async def rank1_silent_while_other_beats(live: Live, mine: tuple[str, int, str], other: tuple[str, int, str]) -> None:
    """Both of ``mine``'s ranks beat, then only rank 0 does, while both ranks of ``other`` keep beating."""
    for rank in (0, 1):
        await live.beat(*mine, rank, step=5)
    for _ in range(4):
        await asyncio.sleep(INTERVAL)
        await live.beat(*mine, 0, step=6)
        for rank in (0, 1):
            await live.beat(*other, rank, step=6)


async def test_silent_rank_on_unreachable_node_is_a_dead_node(live: Live) -> None:
    job_id, record, token = await live.submit()
    live.prober.dead.add("10.0.0.2")
    await beat_both_then_silence(live, job_id, record, token, keep=0)
    found = await live.daemon.detector.check_once()
    assert [d.cause for d in found] == ["NODE_FAILURE"] and found[0].nodes == ("node2",)
    node2 = next(n for n in live.slurm.nodes if n.name == "node2")
    assert node2.state == NodeState.DOWN and "clusterd:" in node2.reason
    assert live.prober.probes.count("10.0.0.2") == 2  # confirmed once before the verdict
    job = await live.status(job_id)
    assert [r.cause for r in job.restarts] == [jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE]
    restart = job.restarts[0]
    assert restart.detected_by == "heartbeat+probe" and list(restart.failed_nodes) == ["node2"]
    assert restart.checkpoint_step == 4  # the ranks' own report, ahead of any storage read
    assert restart.failed_at.ToSeconds() <= restart.detected_at.ToSeconds() <= restart.requeued_at.ToSeconds()
    assert "node2" in job.excluded_nodes
    # The surviving rank is told to stop; a second look at the same run decides nothing more.
    assert (await live.beat(job_id, record, token, 0, step=7)).stop
    await asyncio.sleep(INTERVAL * 3)
    assert await live.daemon.detector.check_once() == []
    assert len((await live.status(job_id)).restarts) == 1


async def test_two_nodes_dying_together_are_one_restart(live: Live) -> None:
    """Their ranks' last beats differ by up to one interval: when node1's ranks pass the suspect
    window, node2's have only missed a beat, and are probed with it, so both go in one decision."""
    job_id, record, token = await live.submit()
    live.prober.dead |= {"10.0.0.1", "10.0.0.2"}
    for rank in (0, 1):
        await live.beat(job_id, record, token, rank, step=5, committed_step=4)
    suspect = live.daemon.detector._suspect_after * INTERVAL
    await asyncio.sleep(suspect - INTERVAL / 2)
    await live.beat(job_id, record, token, 1, step=5)  # node2's last word, half an interval before the end
    await asyncio.sleep(INTERVAL)
    found = await live.daemon.detector.check_once()
    assert [(d.cause, d.nodes) for d in found] == [("NODE_FAILURE", ("node1", "node2"))]
    job = await live.status(job_id)
    assert len(job.restarts) == 1 and sorted(job.restarts[0].failed_nodes) == ["node1", "node2"]


async def test_silent_rank_on_answering_node_is_hung_only_after_the_hang_timeout(live: Live) -> None:
    job_id, record, token = await live.submit()
    await beat_both_then_silence(live, job_id, record, token, keep=0)
    assert await live.daemon.detector.check_once() == []  # suspect, node answers: not yet
    assert live.slurm.calls["set_node_down"] == 0 and live.slurm.calls["requeue"] == 0
    await asyncio.sleep(HANG)
    found = await live.daemon.detector.check_once()
    assert [d.cause for d in found] == ["RANK_HUNG"]
    job = await live.status(job_id)
    assert [r.cause for r in job.restarts] == [jobs_pb2.TERMINATION_CAUSE_RANK_HUNG]
    assert not job.restarts[0].failed_nodes and not job.excluded_nodes  # a healthy node is not excluded
    assert live.slurm.calls["kill_steps"] == 1 and live.slurm.calls["requeue"] == 1
    assert live.slurm.calls["set_node_down"] == 0


async def test_late_but_arriving_beats_are_not_a_hang(live: Live) -> None:
    """A CPU-starved rank beats late (several intervals) but beats: never declared dead or hung."""
    job_id, record, token = await live.submit()
    for _ in range(4):
        for rank in (0, 1):
            await live.beat(job_id, record, token, rank, step=1)
        await asyncio.sleep(HANG * 0.7)  # far beyond the suspect window, inside the hang timeout
        assert await live.daemon.detector.check_once() == []
    assert not (await live.status(job_id)).restarts


async def test_a_rank_that_exits_with_a_failure_is_a_rank_failure(live: Live) -> None:
    job_id, record, token = await live.submit()
    await live.beat(job_id, record, token, 0, step=3)
    await live.beat(job_id, record, token, 1, step=3, exiting=True, exit_code=1)
    found = await live.daemon.detector.check_once()
    assert [d.cause for d in found] == ["RANK_FAILED"] and found[0].detected_by == "rank-exit"
    job = await live.status(job_id)
    assert [r.cause for r in job.restarts] == [jobs_pb2.TERMINATION_CAUSE_RANK_FAILED]
    assert live.slurm.calls["set_node_down"] == 0


async def test_a_rank_failing_because_its_peers_node_died_is_that_nodes_failure(live: Live) -> None:
    """The survivor's collective fails at once when its peer's node dies: that node is probed then,
    and the node failure is what is recorded (and the node excluded), not a rank failure."""
    job_id, record, token = await live.submit()
    await live.beat(job_id, record, token, 1, step=3)
    live.prober.dead.add("10.0.0.2")
    await live.beat(job_id, record, token, 0, step=3, exiting=True, exit_code=1)
    found = await live.daemon.detector.check_once()
    assert [(d.cause, d.nodes) for d in found] == [("NODE_FAILURE", ("node2",))]
    assert "rank 0 on node1 exited with status 1 as a consequence" in found[0].detail
    assert "node2" in (await live.status(job_id)).excluded_nodes


async def test_a_rank_that_asks_to_be_requeued_is_not_a_failure(live: Live) -> None:
    job_id, record, token = await live.submit()
    await live.beat(job_id, record, token, 0, exiting=True, exit_code=85)
    await live.beat(job_id, record, token, 1, exiting=True, exit_code=0)
    assert await live.daemon.detector.check_once() == []


async def test_recovery_phases_running_and_first_step(live: Live) -> None:
    job_id, record, token = await live.submit()
    await live.beat(job_id, record, token, 0, step=1)
    await live.beat(job_id, record, token, 1, step=1, exiting=True, exit_code=9)
    await live.daemon.detector.check_once()
    live.slurm.set_state(job_id, JobState.RUNNING, nodes=("node3", "node4"))
    await live.daemon.poller.poll_once()
    await live.beat(job_id, record, token, 0, "node3", restart_count=1, restored=True, step=-1)  # no step yet
    assert not (await live.status(job_id)).restarts[0].HasField("first_step_at")
    await live.beat(job_id, record, token, 0, "node3", restart_count=1, restored=True, step=2)
    restart = (await live.status(job_id)).restarts[0]
    assert restart.requeued_at.ToNanoseconds() <= restart.running_at.ToNanoseconds()
    assert restart.running_at.ToNanoseconds() <= restart.first_step_at.ToNanoseconds()


async def test_heartbeats_need_the_jobs_own_token(live: Live) -> None:
    job_id, record, token = await live.submit()
    for rec_id, tok in ((record, "x" * 43), (record + 1000, token), (record, "")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await live.beat(job_id, rec_id, tok, 0)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await live.jobs.Heartbeat(jobs_pb2.HeartbeatRequest(record_id=record, token=token, rank=5, world_size=2))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "rank" in (err.value.details() or "")
    reply = await live.beat(job_id, record, token, 0)
    assert abs(reply.interval.ToNanoseconds() / 1e9 - INTERVAL) < 1e-6 and not reply.stop


async def test_a_beat_naming_a_node_outside_the_allocation_is_not_believed(live: Live) -> None:
    """A job's beats are its own word: naming someone else's node cannot get that node probed or
    marked down, however silent the rank then goes."""
    job_id, record, token = await live.submit()
    live.prober.dead.add("10.0.0.5")
    await live.beat(job_id, record, token, 0, step=1)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await live.jobs.Heartbeat(
            jobs_pb2.HeartbeatRequest(
                record_id=record, token=token, job_id=job_id, rank=1, world_size=2, node="node5", step=1
            )
        )
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    for _ in range(4):
        await asyncio.sleep(INTERVAL)
        await live.beat(job_id, record, token, 0, step=2)
    assert await live.daemon.detector.check_once() == []
    assert "10.0.0.5" not in live.prober.probes and live.slurm.calls["set_node_down"] == 0


async def test_a_silent_rank_on_a_node_whose_host_answers_is_not_a_dead_node(live: Live) -> None:
    """A job that falls silent while it fills its node's slurmd queue (connects time out, the host
    still answers ping) gets itself restarted as hung; the node stays in service for everyone."""
    job_id, record, token = await live.submit()
    live.prober.busy.add("10.0.0.2")
    await beat_both_then_silence(live, job_id, record, token, keep=0)
    assert await live.daemon.detector.check_once() == []
    await asyncio.sleep(HANG)
    found = await live.daemon.detector.check_once()
    assert [d.cause for d in found] == ["RANK_HUNG"]
    assert live.slurm.calls["set_node_down"] == 0 and live.slurm.calls["drain_node"] == 0
    assert next(n for n in live.slurm.nodes if n.name == "node2").state == NodeState.IDLE


async def test_a_node_where_another_jobs_ranks_beat_is_alive_without_a_probe(live: Live) -> None:
    job_id, record, token = await live.submit()
    other_id, other_record, other_token = await live.submit()
    live.prober.dead.add("10.0.0.2")  # whatever a probe would say
    await rank1_silent_while_other_beats(live, (job_id, record, token), (other_id, other_record, other_token))
    assert await live.daemon.detector.check_once() == []
    assert "10.0.0.2" not in live.prober.probes and live.slurm.calls["set_node_down"] == 0


async def test_a_dead_node_with_another_users_job_is_drained_not_downed(live: Live) -> None:
    job_id, record, token = await live.submit()
    await live.other_tenant_on("node2")
    live.prober.dead.add("10.0.0.2")
    await beat_both_then_silence(live, job_id, record, token, keep=0)
    found = await live.daemon.detector.check_once()
    assert [(d.cause, d.drain) for d in found] == [("NODE_FAILURE", ("node2",))]
    node2 = next(n for n in live.slurm.nodes if n.name == "node2")
    assert node2.state == NodeState.DRAINING and live.slurm.calls["set_node_down"] == 0
    assert live.slurm.jobs["9999"].state == JobState.RUNNING  # theirs is left to Slurm's own verdict
    assert live.slurm.calls["kill_steps"] == 1 and live.slurm.calls["requeue"] == 1  # ours restarts


async def test_beats_are_claims_checked_against_slurm(live: Live) -> None:
    """The token names the record; the job, node, run and rank bound come from Slurm's view."""
    job_id, record, token = await live.submit()
    other_id, _, _ = await live.submit()
    with pytest.raises(grpc.aio.AioRpcError) as err:  # another job's id
        await live.beat(other_id, record, token, 0)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as err:  # a node outside the allocation
        await live.jobs.Heartbeat(
            jobs_pb2.HeartbeatRequest(record_id=record, token=token, job_id=job_id, rank=0, world_size=2, node="node5")
        )
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as err:  # more ranks than the allocation's CPUs (2 x 4)
        await live.jobs.Heartbeat(
            jobs_pb2.HeartbeatRequest(
                record_id=record, token=token, job_id=job_id, rank=60000, world_size=65536, node="node1"
            )
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # A run Slurm does not show (a forged restart count) is not recorded.
    await live.beat(job_id, record, token, 0, restart_count=7)
    assert live.daemon.liveness.get(record, job_id) is None
    await live.beat(job_id, record, token, 0)
    run = live.daemon.liveness.get(record, job_id)
    assert run is not None and run.job_id == job_id and run.restart_count == 0 and set(run.ranks) == {0}


async def test_beats_of_a_job_not_running_are_not_recorded_and_an_ended_records_token_is_refused(
    live: Live,
) -> None:
    job_id, record, token = await live.submit()
    live.slurm.set_state(job_id, JobState.PENDING, nodes=(), reason="JobHeldUser")
    await live.daemon.poller.poll_once()
    hurried = []
    live.daemon.poller.hurry = hurried.append  # type: ignore[method-assign]
    for _ in range(5):
        reply = await live.beat(job_id, record, token, 0)
    assert live.daemon.liveness.get(record, job_id) is None and reply.interval.ToNanoseconds() / 1e9 <= 0.5
    assert len(hurried) == 1  # a held job's beats cannot keep the queue poll hurried
    live.slurm.set_state(job_id, JobState.CANCELLED, nodes=())
    for _ in range(3):
        await live.daemon.poller.poll_once()
    assert (await live.status(job_id)).state == jobs_pb2.JOB_STATE_CANCELLED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await live.beat(job_id, record, token, 0)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_beat_flood_is_rate_limited_per_job(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterd.liveness import heartbeats

    clock = [1000.0]  # the bucket's clock stands still through the flood, however long it takes here
    monkeypatch.setattr(heartbeats, "_bucket_clock", lambda: clock[0])
    job_id, record, token = await live.submit()

    async def one() -> str:
        try:
            await live.beat(job_id, record, token, 0)
            return "OK"
        except grpc.aio.AioRpcError as exc:
            return exc.code().name

    codes = await asyncio.gather(*(one() for _ in range(1000)))
    # 2 nodes x 4 CPUs, 3 beats a rank an interval of 0.1 s: 240 beats/s after a burst of 480.
    assert codes.count("OK") < 800 and codes.count("RESOURCE_EXHAUSTED") > 100
    clock[0] += 0.5
    assert await one() == "OK"  # the bucket refills: the job's own beats go on


async def test_ids_of_no_live_record_never_block_a_record_made_later(live: Live) -> None:
    """Record ids are handed out in order: beats naming the next one before it exists cost a store
    read each (within the service-wide cap), and do not keep its job's own beats out once it runs."""
    reads = 0
    real = live.daemon.store.jobs.get_by_record

    async def counted(record_id: int):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        return await real(record_id)

    live.daemon.store.jobs.get_by_record = counted  # type: ignore[method-assign]
    for _ in range(20):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await live.jobs.Heartbeat(jobs_pb2.HeartbeatRequest(record_id=1, token="x" * 43))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reads == 20
    job_id, record, token = await live.submit()
    assert record == 1
    assert not (await live.beat(job_id, record, token, 0)).stop
    assert live.daemon.liveness.get(record, job_id) is not None


async def test_a_long_interval_still_leaves_room_for_every_rank_once(live: Live) -> None:
    from clusterd.liveness.heartbeats import _Known

    known = _Known("x", "1", interval=300.0, hang_timeout=600.0)
    for _ in range(3 * 4):  # 4 ranks, three beats each, all within an instant
        live.daemon.heartbeats._spend(known, 4)
    with pytest.raises(ResourceExhausted):
        live.daemon.heartbeats._spend(known, 4)


async def test_another_users_beats_do_not_vouch_for_a_node(live: Live) -> None:
    """A tenant's beat may name any node of its own allocation: it is not taken as evidence that
    another user's silent node lives (the node is probed)."""
    job_id, record, token = await live.submit()
    other_id, other_record, other_token = await live.submit(user=USER_B)
    live.prober.dead.add("10.0.0.2")
    await rank1_silent_while_other_beats(live, (job_id, record, token), (other_id, other_record, other_token))
    found = await live.daemon.detector.check_once()
    assert "10.0.0.2" in live.prober.probes  # probed despite bob's beats naming it
    mine = [(d.cause, d.nodes, d.drain) for d in found if d.job_id == job_id]
    assert mine == [("NODE_FAILURE", ("node2",), ("node2",))]  # drained: bob's job runs there


async def test_a_late_check_after_a_stalled_loop_decides_nothing(live: Live) -> None:
    live.daemon.detector._check_every = 0.05
    job_id, record, token = await live.submit()
    live.prober.dead.add("10.0.0.2")
    await beat_both_then_silence(live, job_id, record, token, keep=0)
    await live.daemon.detector.check_once()  # (the first check after start)
    live.daemon.liveness.get(record, job_id).decided = False  # type: ignore[union-attr]
    await asyncio.sleep(0)
    time_stalled = 1.5
    live.daemon.detector._last_check -= time_stalled
    assert await live.daemon.detector.check_once() == []


async def test_a_cancel_before_a_decided_requeue_shows_is_not_undone(live: Live) -> None:
    """The requeue was decided (and persisted) but Slurm shows the run cancelled, by its user or an
    administrator's scancel: the requeue is never sent again."""
    job_id, record, _ = await live.submit()
    rec = await live.daemon.store.jobs.get_by_record(record)
    assert rec is not None
    rec.acked_restarts = 1  # decided, not yet seen in Slurm
    await live.daemon.store.jobs.save(rec)
    live.slurm.set_state(job_id, JobState.CANCELLED, end_time=1.0)
    await live.daemon.poller.poll_once()
    assert live.slurm.calls["requeue"] == 0
    job = await live.status(job_id)
    assert job.state == jobs_pb2.JOB_STATE_CANCELLED and "cancelled" in job.final_reason, job


async def spare_job(live: Live, time_limit: str = "") -> tuple[str, int, str]:
    """A 2+1 node job (--spare-nodes 1) running on node1-3, its ranks beating from node1 and node2."""
    spec = jobs_pb2.JobSpec(
        command=["train"],
        nodes=2,
        spare_nodes=1,
        time_limit=time_limit,
        restart_policy=jobs_pb2.RestartPolicy(heartbeat_interval=Duration(nanos=int(INTERVAL * 1e9))),
    )
    job = (await live.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), metadata=auth(USER_A))).job
    request = live.slurm.submitted[-1]
    assert request.nodes == 3 and request.no_kill and "CLUSTERCTL_RANK_NODES=2;" in request.script
    token = re.search(r"CLUSTERCTL_HEARTBEAT_TOKEN=(\S+?);", request.script)
    record = re.search(r"CLUSTERCTL_RECORD_ID=(\d+);", request.script)
    assert token and record
    nodes = ("node1", "node2", "node3")
    live.slurm.set_state(job.job_id, JobState.RUNNING, nodes=nodes, batch_host="node1", start_time=time.time())
    await live.daemon.poller.poll_once()
    return job.job_id, int(record.group(1)), token.group(1).strip("'")


async def _node_goes_silent(live: Live, job: tuple[str, int, str], dead: str, alive: str, **beat: object) -> None:
    """The ranks on ``dead`` and ``alive`` beat, then only ``alive``'s, past the suspect window."""
    live.prober.dead.add(f"10.0.0.{dead.removeprefix('node')}")
    ranks = {0: alive, 1: dead}
    for rank, node in ranks.items():
        await live.beat(*job, rank, node=node, step=5, committed_step=4, **beat)  # type: ignore[arg-type]
    for _ in range(4):
        await asyncio.sleep(INTERVAL)
        await live.beat(*job, 0, node=alive, step=6, **beat)  # type: ignore[arg-type]


async def _node_dies(live: Live, job: tuple[str, int, str], dead: str, alive: str, **beat: object) -> None:
    """``dead`` goes silent and the detector finds it."""
    await _node_goes_silent(live, job, dead, alive, **beat)
    assert [d.nodes for d in await live.daemon.detector.check_once()] == [(dead,)]
    await live.daemon.poller.poll_once()


async def test_a_relaunch_lists_steps_before_the_node_goes_down_and_kills_all_when_it_cannot(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    downs_at_listing: list[int] = []

    async def unreadable(job_id: str, on_nodes: tuple[str, ...]) -> tuple[str, ...]:
        downs_at_listing.append(live.slurm.calls["set_node_down"] + live.slurm.calls["drain_node"])
        raise SlurmError("squeue --steps", 0, "node list 'node[1-': bad hostlist")

    monkeypatch.setattr(live.slurm, "steps_on", unreadable)
    job = await spare_job(live)
    await _node_dies(live, job, "node2", "node1")
    assert downs_at_listing == [0]  # listed while Slurm still names the node in its steps
    assert live.slurm.calls["set_node_down"] + live.slurm.calls["drain_node"] == 1
    assert live.slurm.killed_steps_on == [None]  # every step ends: the script's srun never waits forever
    assert (await live.status(job[0])).restarts[0].detail.startswith("in place")


async def test_a_dead_node_of_a_job_with_a_spare_is_replaced_in_place(live: Live) -> None:
    job = await spare_job(live)
    await _node_dies(live, job, "node2", "node1")
    status = await live.status(job[0])
    (restart,) = status.restarts
    assert restart.detail.startswith("in place: spare node3 replaced node2"), restart
    assert restart.HasField("relaunched_at") and not restart.HasField("requeued_at")
    assert live.slurm.calls["requeue"] == 0 and status.state == jobs_pb2.JOB_STATE_RUNNING
    assert status.restart_count == 0 and live.slurm.jobs[job[0]].nodes == ("node1", "node3")
    # Only the service writes where the step runs next: relaunch 1 of run 0, on the survivor and the spare.
    assert live.slurm.admin_comments[job[0]] == "clusterctl-relaunch=0.1@node1,node3"
    assert live.slurm.killed_steps_on == [("node2",)]  # the survivors' other steps (memory tiers) run on
    # The old step's beats are its own run's (told to stop); the relaunched step's start a new run.
    assert (await live.beat(*job, 0, node="node1", step=7)).stop
    for rank, node in ((0, "node1"), (1, "node3")):
        reply = await live.beat(*job, rank, node=node, relaunch=1, restored=True)
        assert not reply.stop
    await live.beat(*job, 1, node="node3", relaunch=1, step=5)
    restart = (await live.status(job[0])).restarts[0]
    assert restart.HasField("running_at") and restart.HasField("first_step_at")
    assert (
        restart.failed_at.ToNanoseconds()
        <= restart.relaunched_at.ToNanoseconds()
        <= restart.first_step_at.ToNanoseconds()
    )


async def test_a_relaunched_steps_first_beat_during_the_kill_is_answered_and_noted(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm may end the old step itself (its node is DOWN) and the script start the next while
    clusterd's kill is still on its way: the new step's first beat comes while the restart holds
    the record. It is answered within its deadline and its first step is noted once the restart is."""
    killing, killed = asyncio.Event(), asyncio.Event()
    kill_steps = live.slurm.kill_steps

    async def slow_kill(job_id: str, steps: tuple[str, ...] | None = None) -> None:
        killing.set()
        await killed.wait()
        await kill_steps(job_id, steps)

    monkeypatch.setattr(live.slurm, "kill_steps", slow_kill)
    job = await spare_job(live)
    await _node_goes_silent(live, job, "node2", "node1")
    deciding = asyncio.create_task(live.daemon.detector.check_once())
    await asyncio.wait_for(killing.wait(), 10)
    first = jobs_pb2.HeartbeatRequest(
        record_id=job[1], token=job[2], job_id=job[0], rank=1, world_size=2, node="node3", relaunch=1, step=5
    )
    assert not (await live.jobs.Heartbeat(first, timeout=1.0)).stop  # answered while the restart holds the record
    killed.set()
    assert [d.nodes for d in await deciding] == [("node2",)]
    (restart,) = (await live.status(job[0])).restarts
    phases = ("failed_at", "detected_at", "relaunched_at", "running_at", "first_step_at")
    assert all(restart.HasField(p) for p in phases), restart
    times = [getattr(restart, p).ToNanoseconds() for p in phases]
    assert times == sorted(times), restart  # the step let start before the kill was through


async def test_no_spare_left_requeues_the_job(live: Live) -> None:
    """The spare was used by a first relaunch: the next death requeues the job (--no-kill: by clusterd)."""
    job = await spare_job(live)
    await _node_dies(live, job, "node2", "node1")
    await _node_dies(live, job, "node3", "node1", relaunch=1)
    status = await live.status(job[0])
    assert len(status.restarts) == 2 and "requeued: no spare node left" in status.restarts[1].detail
    assert live.slurm.calls["requeue"] == 1 and status.restarts[1].HasField("requeued_at")
    assert {"node2", "node3"} <= set(status.excluded_nodes)


async def test_the_batch_hosts_death_requeues_a_job_with_spares(live: Live) -> None:
    job = await spare_job(live)
    await _node_dies(live, job, "node1", "node2")
    (restart,) = (await live.status(job[0])).restarts
    assert "requeued: the batch host node1 died" in restart.detail and job[0] not in live.slurm.admin_comments
    assert live.slurm.jobs[job[0]].restart_count == 1  # Slurm's own requeue of a job that lost its batch host


async def test_a_relaunch_names_only_nodes_of_the_jobs_own_allocation(live: Live) -> None:
    """The ranks' beats claim a node outside the allocation (another tenant's): it is not believed,
    so it is never handed to the relaunched step; nor is another job's node ever taken."""
    job = await spare_job(live)
    await live.other_tenant_on("node4")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await live.beat(*job, 1, node="node4", step=5)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    await _node_dies(live, job, "node2", "node1")
    assert live.slurm.admin_comments[job[0]] == "clusterctl-relaunch=0.1@node1,node3"
    assert live.slurm.jobs["9999"].nodes == ("node4",) and live.slurm.jobs["9999"].state == JobState.RUNNING


async def test_a_refused_relaunch_note_requeues_the_job(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm refuses the job's update (e.g. while it records a resize): the job is requeued instead."""

    async def refused(job_id: str, note: str) -> None:
        raise SlurmError("scontrol", 1, "Job update not available right now, the DB index is being set")

    monkeypatch.setattr(live.slurm, "set_admin_comment", refused)
    job = await spare_job(live)
    await _node_dies(live, job, "node2", "node1")
    (restart,) = (await live.status(job[0])).restarts
    assert "requeued: Slurm refused the relaunch note" in restart.detail and restart.HasField("requeued_at")
    assert live.slurm.calls["requeue"] == 1


async def test_a_node_loss_shows_in_goodput_and_the_beats_get_an_interval(live: Live) -> None:
    job_id, record, token = await live.submit()
    live.slurm.set_state(job_id, JobState.RUNNING, start_time=time.time())  # as Slurm shows a started job
    await live.daemon.poller.poll_once()
    for rank in (0, 1):  # a save that stalled 2 s, then a commit the run saw: the autopilot's inputs
        await live.beat(job_id, record, token, rank, step=1, committed_step=-1)
    await asyncio.sleep(0.3)  # steps, then a save that stalled 0.1 s and committed
    for rank in (0, 1):
        reply = await live.beat(job_id, record, token, rank, step=5, committed_step=4, save_stall_seconds=0.1, saves=1)
    assert reply.HasField("checkpoint_interval")
    floor = live.daemon.config.goodput.interval_floor_seconds
    assert (
        floor <= reply.checkpoint_interval.ToNanoseconds() / 1e9 <= live.daemon.config.goodput.interval_ceiling_seconds
    )
    await asyncio.sleep(0.2)  # steps after the commit: the work the failure loses
    live.prober.dead.add("10.0.0.2")
    await beat_both_then_silence(live, job_id, record, token, keep=0)
    assert [d.cause for d in await live.daemon.detector.check_once()] == ["NODE_FAILURE"]
    ask = jobs_pb2.GetGoodputRequest(job_id=job_id)
    g = await live.jobs.GetGoodput(ask, metadata=auth(USER_A))
    parts = [getattr(g.breakdown, f.name) for f in g.breakdown.DESCRIPTOR.fields]
    assert abs(sum(parts) - g.wall_seconds) < 1e-6 and 0 < g.ettr < 1
    # Lost: the steps after the commit, begun once the 0.1 s save stall (checkpoint stall) was over.
    assert g.breakdown.lost > 0.1 and g.breakdown.checkpoint_stall > 0
    await publish_once(live.daemon.store.jobs, live.daemon.goodput)  # the fleet series: per partition only
    ratio = [s for m in REGISTRY.collect() if m.name == "clusterd_job_goodput_ratio" for s in m.samples]
    assert ratio and all(set(s.labels) == {"partition"} and 0 <= s.value <= 1 for s in ratio)
    # Another tenant is refused as GetJob refuses it; a task id or a bad id is a bad argument.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await live.jobs.GetGoodput(ask, metadata=auth(USER_B))
    with pytest.raises(grpc.aio.AioRpcError) as get_job:
        await live.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=auth(USER_B))
    assert err.value.code() == get_job.value.code() == grpc.StatusCode.PERMISSION_DENIED
    for bad in (f"{job_id}_1", "x;y"):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await live.jobs.GetGoodput(jobs_pb2.GetGoodputRequest(job_id=bad), metadata=auth(USER_A))
        assert err.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)
