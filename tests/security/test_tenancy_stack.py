"""Tenancy on the real stack: one user at every limit leaves the others untouched; a Slurm job id
reused for another user's job is a new job the old owner cannot act on.

A clusterd process of this worktree's code in front of the stack's Slurm (tests/integration's
Daemon), with small per-user limits so that reaching them takes a few calls.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState
from clusterd.store.records import Phase
from clusterd.store.store import sqlite_store
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm
_POLLS = "clusterd_queue_poll_latency_seconds_count{}"


@pytest.fixture(scope="module")
def daemon(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(
        stack,
        tmp_path_factory.mktemp("clusterd"),
        extra_env={"CLUSTERD_LIMITS__MAX_JOBS_PER_USER": "2", "CLUSTERD_LIMITS__MAX_WATCHERS_PER_USER": "2"},
    )
    d.start()
    yield d
    d.stop()


class Caller:
    """One stack user's JobService calls, remembering the jobs to cancel at the end."""

    def __init__(self, channel: grpc.Channel, token: str) -> None:
        self.stub = jobs_pb2_grpc.JobServiceStub(channel)
        self.md = (("authorization", f"Bearer {token}"),)
        self.jobs: list[str] = []

    def submit(self, name: str) -> str:
        spec = jobs_pb2.JobSpec(name=name, command=["sleep", "300"])
        job_id = self.stub.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), metadata=self.md, timeout=60).job.job_id
        self.jobs.append(job_id)
        return str(job_id)

    def watch(self) -> Any:
        """The stream call: an iterator of events that can also be cancelled."""
        return self.stub.WatchJobs(jobs_pb2.WatchJobsRequest(include_initial=True), metadata=self.md)

    def cancel_all(self) -> None:
        for job_id in self.jobs:
            with contextlib.suppress(grpc.RpcError):
                self.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=job_id), metadata=self.md, timeout=30)


def refused(call: Any) -> Any:
    """The error a unary call (a function) or a stream's first read raises."""
    with pytest.raises(grpc.RpcError) as info:
        call() if callable(call) else next(call)
    return info.value


def test_one_user_at_every_limit_leaves_the_others_alone(daemon: Daemon, stack: Stack) -> None:
    with grpc.insecure_channel(daemon.addr) as channel:
        alice, bob = Caller(channel, stack.tokens["alice"]), Caller(channel, stack.tokens["bob"])
        streams: list[Any] = []
        try:
            alice.submit("t-a1"), alice.submit("t-a2")
            err = refused(lambda: alice.submit("t-a3"))
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "limits.max_jobs_per_user" in err.details()
            bob_job = bob.submit("t-b1")  # bob's quota is his own
            for _ in range(2):
                stream = alice.watch()
                assert next(stream).job.user == "alice"
                streams.append(stream)
            err = refused(alice.watch())
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "limits.max_watchers_per_user" in err.details()
            theirs = bob.watch()
            assert next(theirs).job.job_id == bob_job  # bob still watches...
            streams.append(theirs)
            listed = bob.stub.ListJobs(jobs_pb2.ListJobsRequest(), metadata=bob.md, timeout=30).jobs
            assert [j.job_id for j in listed] == [bob_job]  # ...lists his own jobs...
            bob.submit("t-b2")  # ...and submits
        finally:
            for stream in streams:
                stream.cancel()
            alice.cancel_all()
            bob.cancel_all()


async def _seed_finished(path: Path, user: str, job_ids: range) -> None:
    """Records of jobs ``user`` ran before slurmctld lost its state: finished, holding these ids."""
    opened = sqlite_store(path)
    await opened.open()
    store = opened.jobs
    try:
        for job_id in job_ids:
            rec, _ = await store.reserve(user, "", JobSpec(command=("true",)))
            rec.job_id, rec.phase, rec.name = str(job_id), Phase.SUBMITTED, "before-the-reset"
            rec.terminal, rec.state, rec.final_reason = True, JobState.COMPLETED, "completed"
            await store.save(rec)
    finally:
        await opened.close()


def test_a_reused_job_id_is_a_new_job(stack: Stack, tmp_path: Path) -> None:
    """Slurm cannot be reset here (other tests and users share it), so the store is made to hold the ids
    Slurm will hand out next, as it would after a FirstJobId reset; then a real sbatch reuses one."""
    daemon = Daemon(stack, tmp_path / "state")
    daemon.start()
    try:
        _reuse_scenario(daemon, stack)
    finally:
        daemon.stop()


def _reuse_scenario(daemon: Daemon, stack: Stack) -> None:
    with grpc.insecure_channel(daemon.addr) as channel:
        prober = Caller(channel, stack.tokens["bob"])
        probe = prober.submit("t-probe")
        prober.cancel_all()
    daemon.stop()
    asyncio.run(_seed_finished(daemon.state_dir / "clusterd.sqlite3", "alice", range(int(probe) + 1, int(probe) + 300)))
    daemon.start()
    with grpc.insecure_channel(daemon.addr) as channel:
        alice, bob = Caller(channel, stack.tokens["alice"]), Caller(channel, stack.tokens["bob"])
        try:
            job_id = bob.submit("t-reused")  # records are keyed by record id: a reused job id is a new record
            assert int(probe) < int(job_id) < int(probe) + 300, "others submitted 300 jobs meanwhile"
            get = jobs_pb2.GetJobRequest(job_id=job_id)
            assert bob.stub.GetJob(get, metadata=bob.md, timeout=30).job.user == "bob"
            old = alice.stub.GetJob(get, metadata=alice.md, timeout=30).job
            assert old.user == "alice" and old.name == "before-the-reset" and old.terminal  # her own, as it ended
            requeue = jobs_pb2.RequeueJobRequest(job_id=job_id)
            err = refused(lambda: alice.stub.RequeueJob(requeue, metadata=alice.md, timeout=30))
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            cancel = jobs_pb2.CancelJobRequest(job_id=job_id)
            assert alice.stub.CancelJob(cancel, metadata=alice.md, timeout=30).job.user == "alice"  # a no-op
            state, comment = stack.run("squeue", "-h", "-j", job_id, "-o", "%T %k").stdout.split()
            assert state in ("PENDING", "RUNNING") and comment.startswith("clusterctl-record:")  # untouched
            polls = daemon.metrics()[_POLLS]
            wait_for(lambda: daemon.metrics()[_POLLS] >= polls + 2, timeout=30, what="two more queue polls")
            listed = bob.stub.ListJobs(jobs_pb2.ListJobsRequest(), metadata=bob.md, timeout=30).jobs
            assert [j.job_id for j in listed] == [job_id] and not listed[0].terminal  # followed, not wedged
        finally:
            bob.cancel_all()
