"""The view RPCs over FakeSlurm: hold/release, the whole queue, adopt, history (logic, not features:
tests/integration/test_job_views.py proves them on the real stack)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import grpc
import pytest

from clusterctl.v1 import jobs_pb2
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.supervisor import cache as cache_module
from tests.clusterd.conftest import ADMIN, USER_A, USER_B, Harness, auth, code_of, command_request


async def _polls(h: Harness, count: int = 5) -> None:
    for _ in range(count):
        await asyncio.sleep(0.1)
        await h.poll()


async def _submitted(h: Harness, user: str, name: str = "job") -> str:
    resp = await h.jobs.SubmitJob(command_request(name=name), metadata=auth(user))
    return resp.job.job_id


async def test_hold_and_release_reach_slurm_for_the_owner_only(harness: Harness) -> None:
    job_id = await _submitted(harness, USER_A)
    await harness.poll()
    assert await code_of(harness.jobs.HoldJob(jobs_pb2.HoldJobRequest(job_id=job_id), metadata=auth(USER_B))) == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    assert harness.slurm.calls["hold"] == 0
    await harness.jobs.HoldJob(jobs_pb2.HoldJobRequest(job_id=job_id), metadata=auth(USER_A))
    await harness.poll()
    got = await harness.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=auth(USER_A))
    assert got.job.reason == "JobHeldUser"
    await harness.jobs.ReleaseJob(jobs_pb2.ReleaseJobRequest(job_id=job_id), metadata=auth(USER_A))
    assert harness.slurm.held == set()


async def test_holding_a_running_job_is_a_failed_precondition_with_slurms_words(harness: Harness) -> None:
    job_id = await _submitted(harness, USER_A)
    harness.slurm.set_state(job_id, JobState.RUNNING, nodes=("node1",))
    await harness.poll()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await harness.jobs.HoldJob(jobs_pb2.HoldJobRequest(job_id=job_id), metadata=auth(USER_A))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no longer pending" in (err.value.details() or "")


async def test_bad_job_ids_name_the_field(harness: Harness) -> None:
    for call in (
        harness.jobs.HoldJob(jobs_pb2.HoldJobRequest(job_id="x;rm"), metadata=auth(USER_A)),
        harness.jobs.AdoptJob(jobs_pb2.AdoptJobRequest(job_id=""), metadata=auth(USER_A)),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (err.value.details() or "").startswith("job_id:")


async def test_the_queue_shows_everyone_squeues_fields_and_marks_the_callers_own(harness: Harness) -> None:
    mine = await _submitted(harness, USER_A, "mine")
    theirs = await _submitted(harness, USER_B, "theirs")
    await harness.poll()
    queue = await harness.jobs.ListQueue(jobs_pb2.ListQueueRequest(), metadata=auth(USER_A))
    rows = {j.job_id: j for j in queue.jobs}
    assert rows[mine].mine and rows[mine].supervised
    other = rows[theirs]
    assert (other.user, other.name, other.mine, other.supervised) == (USER_B, "theirs", False, False)
    # Records still show only the caller's own.
    listed = await harness.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_A))
    assert {j.job_id for j in listed.jobs} == {mine}
    # slurm.conf's PrivateData=jobs (as clusterd read it at start): squeue shows one's own only.
    harness.daemon.views.slurm_private_jobs = True
    queue = await harness.jobs.ListQueue(jobs_pb2.ListQueueRequest(), metadata=auth(USER_A))
    assert {j.job_id for j in queue.jobs} == {mine}


async def test_adopt_tags_the_owners_plain_sbatch_job_and_supervises_it(harness: Harness) -> None:
    slurm = harness.slurm
    slurm.jobs["900"] = SlurmJob(
        "900",
        "plain",
        USER_A,
        JobState.RUNNING,
        nodes=("node2",),
        submit_time=time.time(),
        stdout="out-%j.txt",
        working_directory="/home/a",
        partition="debug",
    )
    await harness.poll()
    code = await code_of(harness.jobs.AdoptJob(jobs_pb2.AdoptJobRequest(job_id="900"), metadata=auth(USER_B)))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code = await code_of(harness.jobs.AdoptJob(jobs_pb2.AdoptJobRequest(job_id="900"), metadata=auth(ADMIN)))
    assert code == grpc.StatusCode.PERMISSION_DENIED  # owner only, admins included
    call = harness.jobs.AdoptJob(jobs_pb2.AdoptJobRequest(job_id="900"), metadata=auth(USER_A))
    resp, _ = await asyncio.gather(call, _polls(harness))  # adopt answers once a poll shows the new tag
    assert not resp.already and resp.job.state == jobs_pb2.JOB_STATE_RUNNING
    assert slurm.jobs["900"].comment.startswith("clusterctl-record:") and slurm.jobs["900"].requeue
    await harness.poll()
    again = await harness.jobs.AdoptJob(jobs_pb2.AdoptJobRequest(job_id="900"), metadata=auth(USER_A))
    assert again.already
    got = await harness.jobs.GetJob(jobs_pb2.GetJobRequest(job_id="900"), metadata=auth(USER_A))
    assert got.job.stdout_path == "/home/a/out-900.txt"
    slurm.set_state("900", JobState.COMPLETED, end_time=time.time())
    await harness.poll()
    got = await harness.jobs.GetJob(jobs_pb2.GetJobRequest(job_id="900"), metadata=auth(USER_A))
    assert got.job.state == jobs_pb2.JOB_STATE_COMPLETED  # the reconciler follows it like its own


async def test_adopt_finds_a_pending_job_that_partial_polls_skip(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partial polls (24.11 on) skip other users' pending jobs, so a plain sbatch job submitted
    after the last whole read is not in the cache: adoption asks for a whole read first."""
    monkeypatch.setattr(cache_module, "_WANTED_WHOLE_GAP", 0.0)
    harness.slurm.partial = True
    await harness.poll()
    harness.slurm.jobs["901"] = SlurmJob("901", "plain", USER_A, JobState.PENDING, submit_time=time.time())
    await harness.poll()
    assert "901" not in harness.daemon.poller.snapshot.jobs and not harness.daemon.poller.snapshot.whole
    call = harness.jobs.AdoptJob(jobs_pb2.AdoptJobRequest(job_id="901"), metadata=auth(USER_A))
    resp, _ = await asyncio.gather(call, _polls(harness))
    assert not resp.already and harness.slurm.jobs["901"].comment.startswith("clusterctl-record:")
    call = harness.jobs.AdoptJob(jobs_pb2.AdoptJobRequest(job_id="12345"), metadata=auth(USER_A))
    code, _ = await asyncio.gather(code_of(call), _polls(harness))
    assert code == grpc.StatusCode.NOT_FOUND  # not in the whole queue either


async def test_adopt_refuses_jobs_not_in_the_queue_and_bad_uris(harness: Harness) -> None:
    code = await code_of(harness.jobs.AdoptJob(jobs_pb2.AdoptJobRequest(job_id="12345"), metadata=auth(USER_A)))
    assert code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await harness.jobs.AdoptJob(
            jobs_pb2.AdoptJobRequest(job_id="1", checkpoint_uri="ftp://x"), metadata=auth(USER_A)
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith("checkpoint_uri:")


async def test_history_lists_finished_jobs_with_filters_and_accounting(harness: Harness) -> None:
    slurm = harness.slurm
    done = await _submitted(harness, USER_A, "train-1")
    other = await _submitted(harness, USER_A, "eval")
    now = time.time()
    slurm.set_state(done, JobState.COMPLETED, start_time=now - 30, end_time=now, nodes=("node1",))
    slurm.set_state(other, JobState.FAILED, start_time=now - 5, end_time=now, exit_code=3)
    for _ in range(2):
        await harness.poll()
    # A plain sbatch job only accounting knows, and one the store knows too (shown once).
    slurm.accounting = [
        SlurmJob("777", "train-plain", USER_A, JobState.COMPLETED, start_time=now - 9, end_time=now - 1),
        replace(slurm.jobs[done], end_time=now),
        SlurmJob("778", "train-bob", USER_B, JobState.COMPLETED, start_time=now - 9, end_time=now - 1),
    ]
    resp = await harness.jobs.ListHistory(jobs_pb2.ListHistoryRequest(), metadata=auth(USER_A))
    assert resp.accounting
    by_id = {j.job_id: j for j in resp.jobs}
    assert set(by_id) == {done, other, "777"}
    assert by_id[done].source == "clusterd" and by_id[done].elapsed.seconds == 30
    assert by_id[other].exit_code == 3 and by_id["777"].source == "slurmdbd"
    named = await harness.jobs.ListHistory(jobs_pb2.ListHistoryRequest(name="train-*"), metadata=auth(USER_A))
    assert {j.job_id for j in named.jobs} == {done, "777"}
    failed = await harness.jobs.ListHistory(
        jobs_pb2.ListHistoryRequest(states=[jobs_pb2.JOB_STATE_FAILED]), metadata=auth(USER_A)
    )
    assert [j.job_id for j in failed.jobs] == [other]
    code = await code_of(harness.jobs.ListHistory(jobs_pb2.ListHistoryRequest(user="*"), metadata=auth(USER_A)))
    assert code == grpc.StatusCode.PERMISSION_DENIED


async def test_history_without_accounting_says_so(harness: Harness) -> None:
    resp = await harness.jobs.ListHistory(jobs_pb2.ListHistoryRequest(), metadata=auth(USER_A))
    assert not resp.accounting and "not configured" in resp.accounting_note
    request = jobs_pb2.ListHistoryRequest()
    request.since.FromSeconds(int(time.time()))
    request.until.FromSeconds(int(time.time()) - 60)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await harness.jobs.ListHistory(request, metadata=auth(USER_A))
    assert (err.value.details() or "").startswith("since:")


async def test_the_queue_hides_finished_jobs_as_squeue_does(harness: Harness) -> None:
    done = await _submitted(harness, USER_A, "done")
    live = await _submitted(harness, USER_A, "live")
    now = time.time()
    harness.slurm.set_state(done, JobState.COMPLETED, start_time=now - 90, end_time=now - 30)
    harness.slurm.set_state(live, JobState.RUNNING, start_time=now - 10, end_time=now + 3600)  # Slurm's forecast
    await harness.poll()
    queue = await harness.jobs.ListQueue(jobs_pb2.ListQueueRequest(), metadata=auth(USER_A))
    assert [j.job_id for j in queue.jobs] == [live]
    assert not queue.jobs[0].HasField("end_time")  # a running job's end is only a forecast
    asked = jobs_pb2.ListQueueRequest(states=[jobs_pb2.JOB_STATE_COMPLETED])
    queue = await harness.jobs.ListQueue(asked, metadata=auth(USER_A))
    assert [j.job_id for j in queue.jobs] == [done]
    assert queue.jobs[0].end_time.seconds == int(now - 30)  # its TIME is start to end, not to now


async def test_a_job_never_requeued_was_first_submitted_when_slurm_says(harness: Harness) -> None:
    job_id = await _submitted(harness, USER_A)
    await harness.poll()
    job = (await harness.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=auth(USER_A))).job
    assert job.original_submit_time == job.submit_time  # `status` shows no "Requeued" line
