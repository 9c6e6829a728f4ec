"""The autopilot's node failures survive a clusterd restart: read back from the store's restarts."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd.config import GoodputConfig
from clusterd.goodput.autopilot import FailureHistory
from clusterd.goodput.failures import node_failures, restore
from clusterd.model.causes import Cause
from clusterd.model.spec import JobSpec
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.types import JobState, NodeState
from clusterd.store.records import RestartEntry
from clusterd.store.store import sqlite_store

from ..conftest import USER_A, auth, make_config, running

CFG = GoodputConfig(interval_floor_seconds=1, prior_node_mtbf_seconds=3600, failure_window_seconds=7200)


async def test_a_restarted_clusterd_advises_the_interval_it_advised_before(tmp_path: Path) -> None:
    slurm = FakeSlurm.cluster()
    config = replace(make_config(tmp_path), goodput=CFG)
    async with running(config, slurm) as first:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{first.port}") as channel:
            spec = jobs_pb2.JobSpec(command=["train"])
            req = jobs_pb2.SubmitJobRequest(spec=spec)
            job_id = (await jobs_pb2_grpc.JobServiceStub(channel).SubmitJob(req, metadata=auth(USER_A))).job.job_id
        slurm.set_state(job_id, JobState.RUNNING, nodes=("node1", "node2"))
        await first.poller.poll_once()
        # node1 dies: Slurm requeues the job, the service records the restart (a node failure).
        slurm.nodes[0] = replace(slurm.nodes[0], state=NodeState.DOWN)
        slurm.set_state(job_id, JobState.PENDING, nodes=(), restart_count=1, reason="BeginTime")
        await first.poller.poll_once()
        before = first.autopilot.advise(2.0, ["node1", "node2"])
    calm = FailureHistory(CFG)  # what a clusterd that forgot would advise: the prior alone
    async with running(config, slurm) as second:
        after = second.autopilot.advise(2.0, ["node1", "node2"])
        assert after == pytest.approx(before, rel=1e-3)
        assert (after or 0) < (second.autopilot.advise(2.0, ["node5", "node6"]) or 0)
    assert (before or 0) < young(calm)


def young(history: FailureHistory) -> float:
    return float((2 * 2.0 * history.job_mtbf(["node1", "node2"])) ** 0.5)


def failure(cause: Cause, nodes: tuple[str, ...], when: float) -> RestartEntry:
    return RestartEntry(cause, nodes, when + 3, 0, phases={"failed": when, "detected": when + 3})


async def test_only_node_failures_within_the_window_are_read_back_once(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path / "state.db", group_commit=False)
    await store.open()
    try:
        rec, _ = await store.jobs.reserve("alice", "r", JobSpec(command=("x",)))
        now = rec.created + 600  # the service has watched for 600 s (its oldest record's age)
        for entry in (
            failure(Cause.NODE_FAILURE, ("a",), now - 9000),  # out of the window
            failure(Cause.NODE_FAILURE, ("a",), now - 1000),
            failure(Cause.RANK_FAILED, ("b",), now - 900),  # a tenant's crash: not the node's failure
            failure(Cause.NODE_FAILURE, (), now - 800),  # names no node
            failure(Cause.NODE_FAILURE, ("a", "c"), now - 100),
        ):
            await store.jobs.record_restart(rec, entry)
        found = await node_failures(store.jobs, now - CFG.failure_window_seconds)
        assert [(f.nodes, f.when) for f in found] == [(("a",), now - 1000), (("a", "c"), now - 100)]
        history = FailureHistory(CFG, clock=lambda: now)
        assert await restore(history, store.jobs, complete_seconds=0, clock=lambda: now) == 2
        once = history.job_mtbf(["a"])
        await restore(history, store.jobs, complete_seconds=0, clock=lambda: now)  # again (a new lead): no double count
        assert history.job_mtbf(["a"]) == pytest.approx(once)
        # Two failures of a over the 600 s watched, plus the prior's one over its time.
        assert once == pytest.approx((600 + CFG.prior_node_mtbf_seconds) / 3)
    finally:
        await store.close()


DAY = 24 * 3600.0
MONTH = GoodputConfig(interval_floor_seconds=1, prior_node_mtbf_seconds=DAY, failure_window_seconds=30 * DAY)


async def test_failures_and_time_watched_reach_back_only_as_far_as_records_are_kept(tmp_path: Path) -> None:
    """A long-held record keeps the oldest record a month old, but finished ones (and their
    restarts) go after the retention age: a week of failures is not divided by a month watched."""
    store = sqlite_store(tmp_path / "state.db", group_commit=False)
    await store.open()
    try:
        held, _ = await store.jobs.reserve("alice", "held", JobSpec(command=("x",)))
        now = held.created + 20 * DAY
        await store.jobs.record_restart(held, failure(Cause.NODE_FAILURE, ("a",), now - 10 * DAY))  # before
        await store.jobs.record_restart(held, failure(Cause.NODE_FAILURE, ("a",), now - DAY))
        history = FailureHistory(MONTH, clock=lambda: now)
        assert await restore(history, store.jobs, complete_seconds=7 * DAY, clock=lambda: now) == 1
        # One failure of a over the 7 days the store is complete for, plus the prior's one.
        assert history.job_mtbf(["a"]) == pytest.approx((7 * DAY + MONTH.prior_node_mtbf_seconds) / 2)
        everything = FailureHistory(MONTH, clock=lambda: now)  # no retention: all of it is kept
        assert await restore(everything, store.jobs, complete_seconds=0, clock=lambda: now) == 2
        assert everything.job_mtbf(["a"]) == pytest.approx((20 * DAY + MONTH.prior_node_mtbf_seconds) / 3)
    finally:
        await store.close()


async def test_a_leadership_gain_reads_the_failures_another_replica_recorded(tmp_path: Path) -> None:
    config = replace(make_config(tmp_path), goodput=CFG)
    async with running(config) as daemon:
        calm = daemon.autopilot.history.job_mtbf(["node1"])
        # Another replica, leading meanwhile, decided on a node failure in the shared store.
        rec, _ = await daemon.store.jobs.reserve("alice", "r", JobSpec(command=("x",)))
        await daemon.store.jobs.record_restart(rec, failure(Cause.NODE_FAILURE, ("node1",), time.time() - 5))
        daemon._leadership_changed(True)
        first = daemon._lead_task
        daemon._leadership_changed(True)  # regained while the first still reads: read again after it
        assert daemon._lead_task is not None and first is not None
        await daemon._lead_task
        assert first.done()
        assert daemon.autopilot.history.job_mtbf(["node1"]) < calm
