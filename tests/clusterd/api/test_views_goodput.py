"""GetGoodput and the fleet sums of array jobs: refused (naming job_id) and left out, never a
mixed-up timeline of many tasks shown as one job's."""

from __future__ import annotations

import grpc
import pytest

from clusterctl.v1 import jobs_pb2
from clusterd.auth.identity import Identity
from clusterd.slurm.types import JobState
from tests.clusterd.conftest import USER_A, Harness, auth, command_request


async def _goodput(h: Harness, job_id: str) -> jobs_pb2.GetGoodputResponse:
    return await h.jobs.GetGoodput(jobs_pb2.GetGoodputRequest(job_id=job_id), metadata=auth(USER_A))


async def test_an_array_and_its_tasks_are_refused_naming_the_field(harness: Harness) -> None:
    array = (await harness.jobs.SubmitJob(command_request(array="0-3"), metadata=auth(USER_A))).job.job_id
    plain = (await harness.jobs.SubmitJob(command_request(), metadata=auth(USER_A))).job.job_id
    harness.slurm.start_task(array, 2)
    harness.slurm.set_state(plain, JobState.RUNNING, nodes=("node1",))
    await harness.poll()
    for job_id, what in ((array, f"job {array}, an array (--array=0-3)"), (f"{array}_2", f"array task {array}_2")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _goodput(harness, job_id)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (err.value.details() or "").startswith("job_id: goodput is kept for plain jobs only: " + what)
    assert (await _goodput(harness, plain)).wall_seconds >= 0
    fleet = await harness.daemon.views.fleet_goodput(Identity(USER_A))
    assert [row["jobs"] for row in fleet["rows"]] == [1]  # the plain job; the array is not summed
