"""Restart policy end to end through the service, with FakeSlurm playing the cluster."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from clusterctl.v1 import jobs_pb2
from clusterd.auth.identity import Identity
from clusterd.model.causes import Cause
from clusterd.model.spec import JobSpec
from clusterd.server import ClusterDaemon
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.request import JobRequest
from clusterd.slurm.types import JobState, NodeState
from tests.support.privileges import IS_ROOT

from ..conftest import USER_A, Harness, auth, make_config


async def submit(h: Harness, **policy: object) -> str:
    spec = jobs_pb2.JobSpec(command=["train"], restart_policy=jobs_pb2.RestartPolicy(**policy))  # type: ignore[arg-type]
    resp = await h.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), metadata=auth(USER_A))
    return resp.job.job_id


async def status(h: Harness, job_id: str) -> jobs_pb2.JobStatus:
    return (await h.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=auth(USER_A))).job


async def run_then_end(
    h: Harness, job_id: str, state: JobState, exit_code: int = 0, nodes: tuple[str, ...] = ("node1",)
) -> None:
    h.slurm.set_state(job_id, JobState.RUNNING, nodes=nodes)
    await h.poll()
    h.slurm.set_state(job_id, state, nodes=nodes, exit_code=exit_code)
    await h.poll()


async def test_crash_loop_stops_after_no_progress_limit(harness: Harness) -> None:
    job_id = await submit(harness, retryable_exit_codes=[1], no_progress_limit=2, max_restarts=10)
    for _ in range(3):
        await run_then_end(harness, job_id, JobState.FAILED, exit_code=1)
    job = await status(harness, job_id)
    assert job.terminal and job.restart_count == 2
    assert [r.cause for r in job.restarts] == [jobs_pb2.TERMINATION_CAUSE_EXIT_CODE] * 2
    assert "2 restarts made no checkpoint progress" in job.final_reason
    assert harness.slurm.calls["requeue"] == 2


async def test_fatal_and_unlisted_exit_codes_are_not_requeued(harness: Harness) -> None:
    fatal = await submit(harness, retryable_exit_codes=[1], fatal_exit_codes=[3])
    await run_then_end(harness, fatal, JobState.FAILED, exit_code=3)
    dnr = await submit(harness)
    await run_then_end(harness, dnr, JobState.FAILED, exit_code=86)
    plain = await submit(harness)
    await run_then_end(harness, plain, JobState.FAILED, exit_code=2)
    for job_id, words in (
        (fatal, "exit code 3 is fatal"),
        (dnr, "exit code 86 is fatal"),
        (plain, "not requeued by policy"),
    ):
        job = await status(harness, job_id)
        assert job.terminal and not job.restarts and words in job.final_reason
    assert harness.slurm.calls["requeue"] == 0


async def test_user_cancel_is_never_requeued(harness: Harness) -> None:
    job_id = await submit(harness, retryable_exit_codes=[1])
    harness.slurm.set_state(job_id, JobState.RUNNING, nodes=("node1",))
    await harness.poll()
    await harness.jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job_id), metadata=auth(USER_A))
    await harness.poll()
    job = await status(harness, job_id)
    assert job.terminal and job.state == jobs_pb2.JOB_STATE_CANCELLED and not job.restarts
    assert harness.slurm.calls["requeue"] == 0


async def test_node_failure_excludes_the_node_and_starts_at_once(harness: Harness) -> None:
    job_id = await submit(harness)
    harness.slurm.set_state(job_id, JobState.RUNNING, nodes=("node1", "node2"))
    await harness.poll()
    # Slurm's own requeue after the node died: PENDING (BeginTime), restart count bumped.
    harness.slurm.nodes[0] = replace(harness.slurm.nodes[0], state=NodeState.DOWN)
    harness.slurm.set_state(job_id, JobState.PENDING, nodes=(), restart_count=1, reason="BeginTime")
    await harness.poll()
    job = await status(harness, job_id)
    assert not job.terminal and job.restart_count == 1
    (restart,) = job.restarts
    assert restart.cause == jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE and list(restart.failed_nodes) == ["node1"]
    assert list(job.excluded_nodes) == ["node1"]
    assert harness.slurm.jobs[job_id].excluded_nodes == ("node1",)
    assert harness.slurm.calls["update_job"] == 1 and harness.slurm.calls["requeue"] == 0
    # Later polls of the same restart change nothing.
    await harness.poll()
    assert len((await status(harness, job_id)).restarts) == 1


async def test_checkpointed_exit_85_is_requeued_as_requested(harness: Harness) -> None:
    job_id = await submit(harness)
    await run_then_end(harness, job_id, JobState.FAILED, exit_code=85)
    job = await status(harness, job_id)
    assert not job.terminal and job.restarts[0].cause == jobs_pb2.TERMINATION_CAUSE_REQUEUE_REQUESTED
    harness.slurm.set_state(job_id, JobState.RUNNING, nodes=("node3",))
    await harness.poll()
    harness.slurm.set_state(job_id, JobState.COMPLETED, nodes=("node3",))
    await harness.poll()
    job = await status(harness, job_id)
    assert job.terminal and job.state == jobs_pb2.JOB_STATE_COMPLETED and job.final_reason == "completed"


async def test_restart_budget(harness: Harness) -> None:
    job_id = await submit(harness, retryable_exit_codes=[1], max_restarts=1, no_progress_limit=0)
    await run_then_end(harness, job_id, JobState.FAILED, exit_code=1)
    await run_then_end(harness, job_id, JobState.FAILED, exit_code=1)
    job = await status(harness, job_id)
    assert job.terminal and len(job.restarts) == 1 and "restart budget spent" in job.final_reason


async def test_service_killed_between_decision_and_requeue_requeues_once(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    slurm = FakeSlurm.cluster()
    config = make_config(tmp_path)
    daemon = ClusterDaemon(config, backend=slurm)
    await daemon.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
        from clusterctl.v1 import jobs_pb2_grpc

        stub = jobs_pb2_grpc.JobServiceStub(ch)
        spec = jobs_pb2.JobSpec(command=["x"], restart_policy=jobs_pb2.RestartPolicy(retryable_exit_codes=[1]))
        job_id = (await stub.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), metadata=auth(USER_A))).job.job_id
    slurm.set_state(job_id, JobState.RUNNING, nodes=("node1",))
    await daemon.poller.poll_once()
    slurm.set_state(job_id, JobState.FAILED, nodes=("node1",), exit_code=1)

    async def lost_requeue(job: str) -> None:  # the service "dies" right after persisting its decision
        slurm.calls["requeue_lost"] += 1

    original = slurm.requeue
    slurm.requeue = lost_requeue  # type: ignore[method-assign]
    await daemon.poller.poll_once()
    await daemon.stop()
    slurm.requeue = original  # type: ignore[method-assign]

    import clusterd.supervisor.restarts as restarts

    monkeypatch.setattr(restarts, "_REISSUE_AFTER_SECONDS", 0.0)
    daemon = ClusterDaemon(config, backend=slurm)
    await daemon.start()
    for _ in range(3):
        await daemon.poller.poll_once()
    rec = await daemon.store.jobs.get_by_job_id(job_id)
    await daemon.stop()
    assert rec is not None and len(rec.restarts) == 1 and not rec.terminal
    assert slurm.calls["requeue"] == 1 and slurm.jobs[job_id].state == JobState.PENDING


async def wait_for_read(harness: Harness, record_id: int, after: float = 0.0) -> None:
    """Until the progress reader (its own task in the daemon) has finished a read of the record."""
    for _ in range(500):
        if harness.daemon.progress.reading(record_id).read_at > after:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no progress read of record {record_id}")


@pytest.fixture
def user_tmp() -> Iterator[Path]:
    """A directory of USER_A's that USER_A can reach (progress reads a file:// prefix as the job's user)."""
    path = Path(tempfile.mkdtemp(prefix="ckpt-", dir="/tmp"))
    give(path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def give(*paths: Path) -> None:
    """Hand ``paths`` to USER_A when the tests run as root, as clusterd does."""
    if IS_ROOT:
        entry = pwd.getpwnam(USER_A)
        for path in paths:
            os.chown(path, entry.pw_uid, entry.pw_gid)


async def test_poll_rereads_only_records_that_changed(harness: Harness, monkeypatch, user_tmp: Path) -> None:  # type: ignore[no-untyped-def]
    """A poll's cost follows the jobs that changed: settled records are not re-read from the store."""
    store = harness.daemon.store.jobs
    reads: list[int] = []
    real = store.get_by_record

    async def counting(record_id: int):  # type: ignore[no-untyped-def]
        reads.append(record_id)
        return await real(record_id)

    monkeypatch.setattr(store, "get_by_record", counting)
    quiet = [await submit(harness) for _ in range(5)]
    ckpt_dir = user_tmp / "ckpt"
    ckpt_spec = jobs_pb2.JobSpec(command=["train"], checkpoint_uri=f"file://{ckpt_dir}")
    ckpt = (await harness.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=ckpt_spec), metadata=auth(USER_A))).job.job_id
    ckpt_rec = (await store.get_by_job_id(ckpt)).record_id  # type: ignore[union-attr]
    harness.slurm.set_state(ckpt, JobState.RUNNING, nodes=("node1",))
    await harness.poll()
    await wait_for_read(harness, ckpt_rec)
    await harness.poll()
    await harness.poll()  # the first look after a save re-reads once more, then the record settles
    reads.clear()
    await harness.poll()
    assert reads == []  # progress comes from the reader's table: a followed running job settles too

    (ckpt_dir / "commits").mkdir(parents=True)
    (ckpt_dir / "commits" / "000000000007.json").write_text("{}")
    give(ckpt_dir, ckpt_dir / "commits", ckpt_dir / "commits" / "000000000007.json")
    before = harness.daemon.progress.reading(ckpt_rec).read_at
    harness.daemon.progress.refresh(ckpt_rec)
    await wait_for_read(harness, ckpt_rec, after=before)
    reads.clear()
    await harness.poll()
    assert reads == [ckpt_rec]  # a newer step in the table makes the poll look again
    assert (await status(harness, ckpt)).checkpoint_step == 7

    harness.slurm.set_state(quiet[2], JobState.RUNNING, nodes=("node2",))
    reads.clear()
    await harness.poll()
    changed = (await store.get_by_job_id(quiet[2])).record_id  # type: ignore[union-attr]
    assert changed in reads and len(reads) == 2
    assert (await status(harness, quiet[2])).state == jobs_pb2.JOB_STATE_RUNNING

    # An RPC that saves a record (here: cancel) makes the next poll read it again.
    await harness.jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=quiet[0]), metadata=auth(USER_A))
    reads.clear()
    await harness.poll()
    assert (await store.get_by_job_id(quiet[0])).record_id in reads  # type: ignore[union-attr]
    assert (await status(harness, quiet[0])).terminal


class SlowSbatch(FakeSlurm):
    """sbatch that answers only once released, so a submission is still running at shutdown."""

    release: asyncio.Event

    async def submit(self, request: JobRequest) -> str:
        self.calls["submit_started"] += 1
        await self.release.wait()
        return await super().submit(request)


async def test_stop_lets_a_running_submission_record_its_job_before_closing_the_store(tmp_path: Path) -> None:
    slurm = SlowSbatch(nodes=FakeSlurm.cluster().nodes)
    slurm.release = asyncio.Event()
    daemon = ClusterDaemon(make_config(tmp_path), backend=slurm)
    await daemon.start()
    caller = asyncio.create_task(daemon.manager.submit(Identity(USER_A), JobSpec(command=["x"])))
    for _ in range(500):
        if slurm.calls["submit_started"]:
            break
        await asyncio.sleep(0.01)
    caller.cancel()  # the client went away: the shielded submission goes on
    closed_with: list[int] = []
    close = daemon.store.close

    async def close_after_submit() -> None:
        closed_with.append(slurm.calls["submit"])
        await close()

    daemon.store.close = close_after_submit  # type: ignore[method-assign]
    stopping = asyncio.create_task(daemon.stop())
    await asyncio.sleep(0.05)
    slurm.release.set()
    await stopping
    assert closed_with == [1]  # the store closed only after sbatch answered and the record was saved


async def test_a_double_requeue_between_polls_is_two_restarts(harness: Harness) -> None:
    job_id = await submit(harness)
    harness.slurm.set_state(job_id, JobState.RUNNING, nodes=("node1",))
    await harness.poll()
    harness.slurm.set_state(job_id, JobState.PENDING, nodes=(), restart_count=2, reason="BeginTime")
    await harness.poll()
    job = await status(harness, job_id)
    assert len(job.restarts) == 2 and "seen late" in job.restarts[0].detail


async def test_reissued_requeue_survives_an_unavailable_slurm(harness: Harness) -> None:
    from clusterd.errors import SlurmUnavailable
    from clusterd.supervisor import restarts

    job_id = await submit(harness, retryable_exit_codes=[1])
    await run_then_end(harness, job_id, JobState.FAILED, exit_code=1)  # decided: requeue sent
    harness.slurm.set_state(job_id, JobState.FAILED, exit_code=1, restart_count=0)  # ...but never shown
    original, calls = harness.slurm.requeue, []

    async def unavailable(job: str) -> None:
        calls.append(job)
        raise SlurmUnavailable("scontrol", None, "timed out")

    harness.slurm.requeue = unavailable  # type: ignore[method-assign]
    old = restarts._REISSUE_AFTER_SECONDS
    restarts._REISSUE_AFTER_SECONDS = 0.0
    try:
        await harness.poll()
        await harness.poll()
    finally:
        restarts._REISSUE_AFTER_SECONDS = old
        harness.slurm.requeue = original  # type: ignore[method-assign]
    assert calls and not (await status(harness, job_id)).terminal  # still supervised, retried later


def test_exclusions_expire_but_the_users_own_stay() -> None:
    import time as _time

    from clusterd.store.records import JobRecord, Phase, RestartEntry
    from clusterd.supervisor.restarts import still_excluded

    now = _time.time()
    rec = JobRecord(
        1,
        "u",
        "r",
        JobSpec(),
        Phase.SUBMITTED,
        now,
        excluded_nodes=("n1", "n2", "n9"),
        restarts=[
            RestartEntry(Cause.NODE_FAILURE, ("n1",), now - 3600, -1),
            RestartEntry(Cause.NODE_FAILURE, ("n2",), now - 60, -1),
        ],
    )
    assert still_excluded(rec, now) == ("n2", "n9")  # n1 failed an hour ago; n9 is the user's --exclude


async def test_a_node_back_before_the_poll_is_still_a_node_failure(harness: Harness) -> None:
    """ReturnToService brought the dead node back before the next poll: its slurmd started after the
    run did, so the requeue Slurm made is a node failure of that node, which is then excluded."""
    import time as _time

    job_id = await submit(harness)
    started = _time.time() - 30
    harness.slurm.set_state(job_id, JobState.RUNNING, nodes=("node1", "node2"), start_time=started)
    await harness.poll()
    harness.slurm.nodes = [
        replace(n, slurmd_started=_time.time()) if n.name == "node2" else n for n in harness.slurm.nodes
    ]
    harness.slurm.set_state(job_id, JobState.PENDING, nodes=(), restart_count=1, reason="BeginTime")
    await harness.poll()
    job = await status(harness, job_id)
    assert [r.cause for r in job.restarts] == [jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE]
    assert list(job.restarts[0].failed_nodes) == ["node2"] and "node2" in job.excluded_nodes


async def test_a_stale_kill_at_the_failed_nodes_return_requeues_again(harness: Harness) -> None:
    """node1 died and Slurm requeued the job; when node1 came back Slurm placed the new run there and
    its queued kill for the lost run ended it at once (exit 143): the job is requeued, not failed."""
    import time as _time

    job_id = await submit(harness, exclude_failed_nodes=False)
    harness.slurm.set_state(job_id, JobState.RUNNING, nodes=("node1",))
    await harness.poll()
    harness.slurm.nodes[0] = replace(harness.slurm.nodes[0], state=NodeState.DOWN)
    harness.slurm.set_state(job_id, JobState.PENDING, nodes=(), restart_count=1, reason="BeginTime")
    await harness.poll()
    harness.slurm.nodes[0] = replace(harness.slurm.nodes[0], state=NodeState.IDLE)
    now = float(int(_time.time()))
    harness.slurm.set_state(
        job_id, JobState.FAILED, nodes=("node1",), exit_code=143, start_time=now, end_time=now, reason="NonZeroExitCode"
    )
    await harness.poll()
    job = await status(harness, job_id)
    assert not job.terminal, job.final_reason
    assert [r.cause for r in job.restarts] == [jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE] * 2
    assert "killed as it started on node1" in job.restarts[1].detail and not job.restarts[1].failed_nodes
    assert harness.slurm.calls["requeue"] == 1
