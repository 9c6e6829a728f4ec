"""JobManager.submit over FakeSlurm: what reaches the seam, request-id reuse, and what status shows."""

from __future__ import annotations

import os
import tempfile

import grpc
import pytest

from clusterctl.v1 import jobs_pb2
from clusterd.slurm.request import ExportMode, Signal

from ..conftest import USER_A, Harness, auth


async def submit(h: Harness, spec: jobs_pb2.JobSpec, user: str = USER_A) -> jobs_pb2.SubmitJobResponse:
    return await h.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), metadata=auth(user))


async def test_reused_request_id_with_a_different_request_is_already_exists(harness: Harness) -> None:
    first = await submit(harness, jobs_pb2.JobSpec(command=["true"], request_id="r1"))
    again = await submit(harness, jobs_pb2.JobSpec(command=["true"], request_id="r1"))
    assert again.duplicate and again.job.job_id == first.job.job_id
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await submit(harness, jobs_pb2.JobSpec(command=["false"], request_id="r1"))
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert f"job {first.job.job_id}" in (info.value.details() or "")
    assert harness.slurm.calls["submit"] == 1


async def test_checkpoint_signal_only_for_jobs_that_ask(harness: Harness) -> None:
    await submit(harness, jobs_pb2.JobSpec(command=["true"], time_limit="10"))
    await submit(harness, jobs_pb2.JobSpec(command=["true"], time_limit="10", checkpoint_uri="s3://bucket/run"))
    explicit = jobs_pb2.RestartPolicy(signal_before_timeout_seconds=30)
    await submit(harness, jobs_pb2.JobSpec(command=["true"], restart_policy=explicit))
    own = "#!/bin/bash\n#SBATCH --signal=B:TERM@15\ntrue\n"
    await submit(harness, jobs_pb2.JobSpec(script=own, checkpoint_uri="s3://bucket/run"))
    signals = [r.signal for r in harness.slurm.submitted]
    assert signals == [None, Signal("USR1", 120), Signal("USR1", 30), Signal("TERM", 15)]


async def test_directories_export_and_status_view(harness: Harness) -> None:
    with tempfile.TemporaryDirectory() as cwd:
        os.chmod(cwd, 0o755)  # the caller (nobody) must be able to enter it
        os.mkdir(f"{cwd}/run")
        spec = jobs_pb2.JobSpec(
            script="#!/bin/bash\n#SBATCH -o out-%j.txt\n#SBATCH -D run\n#SBATCH -t 1:00:00\ntrue\n",
            submit_directory=cwd,
            script_name="train.sh",
            environment={"A": "1", "B": "2"},
            export="A,C=3",
        )
        resp = await submit(harness, spec)
        req = harness.slurm.submitted[-1]
        assert (req.submit_directory, req.working_directory, req.stdout) == (cwd, f"{cwd}/run", "out-%j.txt")
        assert req.name == "train.sh" and req.user == USER_A
        assert req.export.mode is ExportMode.LIST and dict(req.export.variables) == {"A": "1", "C": "3"}
        job = resp.job
        assert job.working_directory == f"{cwd}/run"
        assert job.stdout_path == f"{cwd}/run/out-{job.job_id}.txt" and job.stderr_path == ""
        assert job.time_limit.seconds == 3600 and job.original_submit_time.seconds > 0
        assert not job.has_exit_code


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (jobs_pb2.JobSpec(command=["true"], working_directory="/nonexistent/dir"), "spec.working_directory"),
        (jobs_pb2.JobSpec(command=["true"], submit_directory="/nonexistent"), "spec.submit_directory"),
        (jobs_pb2.JobSpec(script="#!/bin/bash\n#SBATCH -D /etc/passwd\ntrue\n"), "spec.working_directory"),
    ],
)
async def test_missing_directories_are_refused_up_front(harness: Harness, spec: jobs_pb2.JobSpec, field: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await submit(harness, spec)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith(field)
    assert harness.slurm.calls["submit"] == 0


async def test_arrays_render_and_count_tasks(harness: Harness) -> None:
    await submit(harness, jobs_pb2.JobSpec(script="#!/bin/bash\n#SBATCH --array=0-9:2%2\ntrue\n"))
    req = harness.slurm.submitted[-1]
    assert req.array is not None and req.array.render() == "0,2,4,6,8%2" and req.task_count == 5


async def test_every_submit_checks_its_directories(harness: Harness) -> None:
    """Nothing is kept between submits: a directory removed since the last submit is refused at once,
    and one created since passes at once."""
    with tempfile.TemporaryDirectory() as cwd:
        os.chmod(cwd, 0o755)
        run = f"{cwd}/run"
        os.mkdir(run, 0o755)
        await submit(harness, jobs_pb2.JobSpec(command=["true"], submit_directory=run))
        os.rmdir(run)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await submit(harness, jobs_pb2.JobSpec(command=["true"], submit_directory=run))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (info.value.details() or "").startswith("spec.submit_directory")
        os.mkdir(run, 0o755)
        await submit(harness, jobs_pb2.JobSpec(command=["true"], submit_directory=run))
    assert harness.slurm.calls["submit"] == 2
    assert [r.submit_directory for r in harness.slurm.submitted] == [run, run]
