"""Audit log: one JSON line per mutating call that reached the domain, refused ones included.

Calls refused at the edge (no credential, over the request rate) never reach JobManager: the
interceptor's log line and metrics record those; the audit log holds what authenticated callers
asked of their jobs.
"""

from __future__ import annotations

import asyncio
import json
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

from clusterctl.v1 import jobs_pb2
from clusterd.security.audit import AuditLog
from clusterd.slurm.fake import FakeSlurm

from ..conftest import USER_A, auth, base_config, code_of, command_request, running, stub

USER_B = "daemon"


def read_audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_every_mutating_call_is_audited(tmp_path: Path) -> None:
    slurm = FakeSlurm.cluster()
    audit = tmp_path / "logs" / "audit.jsonl"
    cfg = replace(base_config(tmp_path, max_jobs_per_user=1), audit_log=str(audit))
    async with running(cfg, slurm) as daemon, grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
        jobs = stub(ch)
        job = (await jobs.SubmitJob(command_request(request_id="req-1"), metadata=auth(USER_A))).job  # 1
        await jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_A))  # 2: reads are not audited
        await jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job.job_id), metadata=auth(USER_A))  # 3
        assert (
            await code_of(jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.job_id), metadata=auth(USER_B)))
            == grpc.StatusCode.PERMISSION_DENIED
        )
        bad = jobs_pb2.SubmitJobRequest(spec=jobs_pb2.JobSpec(command=["x"], partition="no;such"))
        assert await code_of(jobs.SubmitJob(bad, metadata=auth(USER_A))) == grpc.StatusCode.INVALID_ARGUMENT  # 4
        forged = jobs_pb2.CancelJobRequest(job_id='1\n{"user":"root","result":"OK"}')
        assert await code_of(jobs.CancelJob(forged, metadata=auth(USER_A))) == grpc.StatusCode.INVALID_ARGUMENT  # 5
        assert await code_of(jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.job_id))) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
        await jobs.RequeueJob(jobs_pb2.RequeueJobRequest(job_id=job.job_id), metadata=auth(USER_A))  # 6
        await jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.job_id), metadata=auth(USER_A))  # 7
        assert await code_of(jobs.SubmitJob(command_request(), metadata=auth(USER_A))) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED
        )
    assert stat.S_IMODE(audit.stat().st_mode) == 0o600
    entries = read_audit(audit)
    summary = [(e["method"], e["user"], e["result"]) for e in entries]
    assert summary == [
        ("SubmitJob", USER_A, "OK"),
        ("CancelJob", USER_B, "PERMISSION_DENIED"),
        ("SubmitJob", USER_A, "INVALID_ARGUMENT"),
        ("CancelJob", USER_A, "INVALID_ARGUMENT"),
        ("RequeueJob", USER_A, "OK"),
        ("CancelJob", USER_A, "OK"),
        ("SubmitJob", USER_A, "RESOURCE_EXHAUSTED"),
    ]
    first = entries[0]
    assert first["job_id"] == job.job_id and first["request_id"] == "req-1" and first["auth"] == "token"
    assert first["peer"].startswith("ipv4:127.0.0.1:") and first["time"].endswith("+00:00")
    assert entries[3]["job_id"].startswith("1\n{")  # kept as data, inside one JSON line
    assert "partition" in entries[2]["error"]
    assert all(e["job_id"] == job.job_id for e in (entries[1], entries[4], entries[5]))
    assert "limits.max_jobs_per_user" in entries[6]["error"]  # the quota names its limit


async def test_audit_log_defaults_to_the_state_dir(tmp_path: Path) -> None:
    cfg = base_config(tmp_path)
    async with running(cfg) as daemon, grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
        await stub(ch).SubmitJob(command_request(), metadata=auth(USER_A))
    assert daemon.audit.path == Path(cfg.state_dir) / "audit.log"
    assert len(read_audit(daemon.audit.path)) == 1


async def test_a_line_is_in_the_file_when_the_call_is_answered(tmp_path: Path) -> None:
    """Nothing waits in memory: a clusterd killed right after answering (SIGKILL) has the line on file."""
    audit = tmp_path / "audit.jsonl"
    cfg = replace(base_config(tmp_path), audit_log=str(audit))
    async with running(cfg) as daemon, grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
        jobs = stub(ch)
        for i in range(3):
            job = (await jobs.SubmitJob(command_request(request_id=f"r{i}"), metadata=auth(USER_A))).job
            assert read_audit(audit)[-1]["job_id"] == job.job_id  # before the service stops or closes anything
            assert len(read_audit(audit)) == i + 1


async def test_concurrent_lines_are_written_whole(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    for i in range(3):
        await log.record(user="alice", method="SubmitJob", job_id=f"seq{i}", result="OK")
    assert [e["job_id"] for e in read_audit(tmp_path / "audit.jsonl")] == ["seq0", "seq1", "seq2"]  # in order
    await asyncio.gather(*(log.record(user="alice", method="SubmitJob", job_id=str(i)) for i in range(500)))
    log.close()
    await log.record(user="alice", method="CancelJob", job_id="late")  # after close: logged, not raised
    ids = [e["job_id"] for e in read_audit(tmp_path / "audit.jsonl")]
    assert sorted(ids[3:]) == sorted(str(i) for i in range(500)) and "late" not in ids
