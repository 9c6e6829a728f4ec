"""Metrics and request-id logs of a real clusterd in front of the real stack."""

from __future__ import annotations

import subprocess
import sys
import uuid

import grpc
import pytest

from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm


def test_request_id_follows_a_submit_down_to_slurm_and_back(daemon: Daemon) -> None:
    rid = f"it-{uuid.uuid4().hex[:10]}"
    before = daemon.metrics()
    with grpc.insecure_channel(daemon.addr) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        auth = ("authorization", f"Bearer {daemon.stack.tokens['alice']}")
        spec = jobs_pb2.JobSpec(name="obs-probe", command=["sleep", "60"])
        resp, call = stub.SubmitJob.with_call(
            jobs_pb2.SubmitJobRequest(spec=spec), metadata=[auth, ("x-request-id", rid)]
        )
        assert ("x-request-id", rid) in tuple(call.trailing_metadata())
        job_id = resp.job.job_id
        stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=job_id), metadata=[auth, ("x-request-id", rid + "-c")])

    records = daemon.log_records()
    backend = next(k.split('backend="')[1].split('"')[0] for k in before if k.startswith("clusterd_slurm_info{"))
    submit, cancel, queue = _COMMANDS[backend]
    mine = [r for r in records if r.get("request_id") == rid]
    call = [r for r in mine if r["message"] == f"slurm {submit} ok"]
    assert len(call) == 1, mine
    if backend == "commands":
        argv = call[0]["argv"]
        # sbatch runs as alice herself (no --uid from root): the log line names the identity it ran with.
        assert argv[0] == "sbatch" and not [a for a in argv if a.startswith("--uid")] and call[0]["run_as"] == "alice"
        assert "--job-name=obs-probe" in argv and call[0]["user"] == "alice"
    rpc = [r for r in mine if r["message"].startswith("rpc ")]
    assert rpc and rpc[0]["method"] == "JobService/SubmitJob" and rpc[0]["code"] == "OK"
    cancelled = [r for r in records if r.get("request_id") == rid + "-c" and r["message"].startswith("slurm ")]
    assert [r["message"] for r in cancelled] == [f"slurm {cancel} ok"]
    if backend == "commands":
        assert [r["argv"] for r in cancelled] == [["scancel", job_id]]

    polls = "clusterd_queue_poll_latency_seconds_count{}"
    after = wait_for(lambda: (m := daemon.metrics())[polls] > before[polls] and m, timeout=10, what="a later poll")
    key = 'clusterd_rpcs_total{code="OK",method="JobService/SubmitJob"}'
    assert after[key] == before.get(key, 0) + 1
    calls = f'clusterd_slurm_calls_total{{backend="{backend}",command="{submit}",outcome="ok"}}'
    assert after[calls] == before.get(calls, 0) + 1
    assert after[f'clusterd_slurm_calls_total{{backend="{backend}",command="{queue}",outcome="ok"}}'] > 0


# Each backend's names for a submit, a cancel and the queue read, on the log lines and metrics.
_COMMANDS = {"commands": ("sbatch", "scancel", "squeue"), "slurmrestd": ("POST job/submit", "DELETE job", "GET jobs")}


def test_clusterd_check_on_the_stack(stack: Stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cmd = [
        sys.executable,
        "-m",
        "clusterd.main",
        "check",
        "--config",
        str(stack.dir / "clusterd.toml"),
        "--storage-uri",
        f"s3://{stack.env['CLUSTERCTL_BUCKET']}/check-probe",
    ]
    env = {**stack.slurm_env(), **{k: v for k, v in stack.env.items() if k.startswith("AWS_")}}
    ok = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Slurm 22.05.8 (JSON/REST v0.0.38)" in ok.stdout and "6 nodes" in ok.stdout
    # A wrong secret key: the storage line says so, the rest still passes, exit 1.
    bad = subprocess.run(
        cmd, capture_output=True, text=True, env={**env, "AWS_SECRET_ACCESS_KEY": "wrong"}, timeout=120
    )
    assert bad.returncode == 1
    failed = [ln for ln in bad.stdout.splitlines() if ln.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].split()[1] == "storage", bad.stdout
    assert "Traceback" not in bad.stdout + bad.stderr
