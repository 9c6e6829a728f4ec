"""JobService on the real stack: real sbatch, real squeue, real users, real GRES."""

from __future__ import annotations

import concurrent.futures
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterctl.errors import ServiceError
from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

GPU_SCRIPT = """#!/bin/bash
#SBATCH --job-name=gpu-probe
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --time=5
echo "user=$(id -un) gpus=$CUDA_VISIBLE_DEVICES msg=$MSG record=$CLUSTERCTL_RECORD_ID"
srun bash -c 'echo "task on $SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES"'
"""


def terminal(client, job_id: str):  # type: ignore[no-untyped-def]
    def check():  # type: ignore[no-untyped-def]
        job = client.get(job_id)
        return job if job.terminal else None

    return wait_for(check, timeout=90, what=f"job {job_id} to finish")


def squeue_ids(stack: Stack) -> dict[str, dict]:  # type: ignore[type-arg]
    data = json.loads(stack.run("squeue", "--all", "--json").stdout)
    return {str(j["job_id"]): j for j in data["jobs"]}


def test_script_job_runs_as_the_user_on_two_nodes_with_gpus(daemon: Daemon, stack: Stack) -> None:
    client = daemon.client("alice")
    spec = jobs_pb2.JobSpec(script=GPU_SCRIPT, environment={"MSG": "hello $(id) world"})
    resp = client.submit(spec)
    job = resp.job
    assert job.job_id.isdigit() and job.user == "alice"
    assert "leaf" in job.placement_explanation
    done = terminal(client, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    assert len(done.nodes) == 2 and done.exit_code == 0
    out = Path(stack.dir) / "jobs" / "alice" / f"gpu-probe-{job.job_id}.out"
    text = out.read_text()
    assert "user=alice gpus=0,1,2,3 msg=hello $(id) world" in text
    assert text.count("task on node") == 2
    assert out.stat().st_uid == __import__("pwd").getpwnam("alice").pw_uid
    # Slurm got the service's options on top of the script's own lines.
    got = client.get(job.job_id)
    assert got.spec.script == GPU_SCRIPT


def test_command_job_cancel_and_list(daemon: Daemon) -> None:
    client = daemon.client("bob")
    job = client.submit(jobs_pb2.JobSpec(name="sleeper", command=["sleep", "300"])).job
    wait_for(lambda: client.get(job.job_id).state == jobs_pb2.JOB_STATE_RUNNING, what="running")
    listed = client.list_jobs()
    assert job.job_id in {j.job_id for j in listed}
    assert {j.user for j in listed} == {"bob"}
    client.cancel(job.job_id)
    done = terminal(client, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_CANCELLED


def test_watch_streams_state_changes(daemon: Daemon) -> None:
    client = daemon.client("alice")
    job = client.submit(jobs_pb2.JobSpec(name="short", command=["sleep", "6"])).job  # RUNNING spans several polls
    states = []
    for event in daemon.client("alice").watch([job.job_id], include_initial=True):
        states.append(event.job.state)
        if event.job.terminal:
            break
    assert states[-1] == jobs_pb2.JOB_STATE_COMPLETED
    assert jobs_pb2.JOB_STATE_RUNNING in states or jobs_pb2.JOB_STATE_COMPLETING in states


def test_same_request_id_is_one_slurm_job_even_concurrently(daemon: Daemon, stack: Stack) -> None:
    rid = f"idem-{uuid.uuid4().hex[:8]}"

    def submit_once(_: int) -> jobs_pb2.SubmitJobResponse:
        return daemon.client("alice").submit(jobs_pb2.JobSpec(name=rid, command=["true"], request_id=rid))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(submit_once, range(8)))
    ids = {r.job.job_id for r in results}
    assert len(ids) == 1
    assert sum(not r.duplicate for r in results) == 1
    in_slurm = [j for j in squeue_ids(stack).values() if j["name"] == rid]
    assert len(in_slurm) == 1


def test_records_survive_a_killed_service(daemon: Daemon, stack: Stack) -> None:
    rid = f"restart-{uuid.uuid4().hex[:8]}"
    client = daemon.client("alice")
    job = client.submit(jobs_pb2.JobSpec(name=rid, command=["sleep", "4"], request_id=rid)).job
    daemon.restart()  # SIGKILL, then start on the same state dir
    client = daemon.client("alice")
    again = client.submit(jobs_pb2.JobSpec(name=rid, command=["sleep", "4"], request_id=rid))
    assert again.duplicate and again.job.job_id == job.job_id
    done = terminal(client, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED
    assert len([j for j in squeue_ids(stack).values() if j["name"] == rid]) == 1


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (jobs_pb2.JobSpec(command=["true"], partition="nosuch"), "spec.partition"),
        (jobs_pb2.JobSpec(command=["true"], time_limit="1:2:3:4"), "spec.time_limit"),
        (jobs_pb2.JobSpec(command=["true"], environment={"LD_PRELOAD=": "x"}), "spec.environment"),
        (jobs_pb2.JobSpec(command=["true"], name="x\ny"), "spec.name"),
        (jobs_pb2.JobSpec(command=["true"], gpus_per_node=5), "spec.gpus_per_node"),
        (jobs_pb2.JobSpec(command=["true"], nodes=7), "spec.nodes"),
        (jobs_pb2.JobSpec(script="#!/bin/bash\n#SBATCH --uid=0\nid\n"), "spec.script"),
    ],
)
def test_rejected_requests_reach_no_slurm(daemon: Daemon, stack: Stack, spec: jobs_pb2.JobSpec, field: str) -> None:
    marker = f"reject-{uuid.uuid4().hex[:8]}"
    spec.request_id = marker
    before = stack.run("sdiag").stdout
    with pytest.raises(ServiceError) as info:
        daemon.client("alice").submit(spec)
    assert info.value.code_name == "INVALID_ARGUMENT"
    assert field in info.value.message
    after = stack.run("sdiag").stdout
    assert _submits(after) == _submits(before), "a rejected request reached sbatch"


def _submits(sdiag: str) -> int:
    for line in sdiag.splitlines():
        if "REQUEST_SUBMIT_BATCH_JOB" in line:
            return int(line.split("count:")[1].split()[0])
    return 0


def test_auth_on_the_real_service(daemon: Daemon) -> None:
    job = daemon.client("alice").submit(jobs_pb2.JobSpec(name="mine", command=["true"])).job
    with pytest.raises(ServiceError) as info:
        daemon.client("bob").get(job.job_id)
    assert info.value.code_name == "PERMISSION_DENIED"
    with pytest.raises(ServiceError) as info:
        daemon.client("bob").cancel(job.job_id)
    assert info.value.code_name == "PERMISSION_DENIED"
    assert daemon.client("root").get(job.job_id).user == "alice"
    from clusterctl.client import ClusterClient

    with pytest.raises(ServiceError) as info:
        ClusterClient(daemon.addr, "").list_jobs()
    assert info.value.code_name == "UNAUTHENTICATED"
    with pytest.raises(ServiceError) as info:
        ClusterClient(daemon.addr, "x" * 32).list_jobs()
    assert info.value.code_name == "UNAUTHENTICATED"


@pytest.fixture(scope="module")
def restd_daemon(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A clusterd whose backend is slurmrestd (JWT signed per user) instead of Slurm's commands."""
    if "CLUSTERCTL_RESTD_URL" not in stack.env:
        pytest.fail("the stack's env file has no CLUSTERCTL_RESTD_URL: run deploy/local/stack.sh up")
    d = Daemon(
        stack,
        tmp_path_factory.mktemp("clusterd-restd"),
        extra_env={
            "CLUSTERD_SLURM__BACKEND": "slurmrestd",
            "CLUSTERD_SLURM__RESTD_URL": stack.env["CLUSTERCTL_RESTD_URL"],
            "CLUSTERD_SLURM__JWT_KEY_FILE": stack.env["CLUSTERCTL_JWT_KEY"],
        },
    )
    d.start()
    yield d
    d.stop()


def test_slurmrestd_backend_runs_a_job_end_to_end(restd_daemon: Daemon, stack: Stack) -> None:
    """Same job as the first test, through POST job/submit: user, GPUs, #SBATCH lines, placement."""
    client = restd_daemon.client("alice")
    job = client.submit(jobs_pb2.JobSpec(script=GPU_SCRIPT, environment={"MSG": "via rest"})).job
    done = terminal(client, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    assert len(done.nodes) == 2 and done.user == "alice"
    out = Path(stack.dir) / "jobs" / "alice" / f"gpu-probe-{job.job_id}.out"
    assert "user=alice gpus=0,1,2,3 msg=via rest" in out.read_text()
    calls = restd_daemon.metrics()
    assert calls['clusterd_slurm_calls_total{backend="slurmrestd",command="POST job/submit",outcome="ok"}'] == 1
    assert calls.get('clusterd_slurm_calls_total{backend="commands",command="sbatch",outcome="ok"}', 0) == 0
    assert calls['clusterd_slurm_info{backend="slurmrestd",version="22.05.8"}'] == 1
    posted = [r for r in restd_daemon.log_records() if r["message"] == "slurm POST job/submit ok"]
    assert len(posted) == 1 and posted[0]["user"] == "alice" and posted[0]["request_id"]
