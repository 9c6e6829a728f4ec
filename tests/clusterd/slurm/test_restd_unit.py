"""slurmrestd backend without a server: the option -> v0.0.38 JSON mapping and HTTP handling (fast)."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Any

import jwt
import pytest

from clusterd.errors import SlurmError, SlurmUnavailable
from clusterd.observability.metrics import REGISTRY
from clusterd.slurm.request import Export, ExportMode, JobRequest, Signal, Switches
from clusterd.slurm.restd import RestdBackend
from clusterd.slurm.restd_http import HttpFailure, Reply
from clusterd.slurm.restd_submit import job_description
from tests.support.backends import RESTD_KEY as KEY
from tests.support.backends import Sent, answer, restd_backend

BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
SCRIPT = "#!/bin/bash\necho hi\n"


def args(script: str = SCRIPT, **fields: object) -> JobRequest:
    return JobRequest(
        script=script, name=str(fields.pop("name", "job")), user=str(fields.pop("user", "alice")), **fields
    )  # type: ignore[arg-type]


def test_every_field_maps_to_the_v0038_keys() -> None:
    body = job_description(
        args(
            name="train",
            nodes=2,
            tasks_per_node=4,
            cpus_per_task=2,
            gpus_per_node=4,
            comment="clusterd:7",
            memory_mb_per_node=2048,
            time_limit_seconds=3600,
            signal=Signal("USR1", 120, batch_only=False),
            partition="batch",
            account="ml",
            qos="high",
            constraint="a100&ib",
            stdout="/j/%x-%j.out",
            stderr="/j/%x-%j.err",
            exclude=("node1", "node2"),
            working_directory="/j",
            submit_directory="/s",
        ),
        BASE_ENV,
    )
    assert body["script"] == SCRIPT
    assert body["job"] == {
        "name": "train",
        "nodes": "2",
        "tasks": 8,  # sbatch's -n from -N x --ntasks-per-node
        "tasks_per_node": 4,
        "cpus_per_task": 2,
        "gres": "gpu:4",
        "requeue": True,
        "open_mode": "append",
        "comment": "clusterd:7",
        "memory_per_node": 2048,
        "time_limit": "60",
        "signal": "USR1@120",
        "partition": "batch",
        "account": "ml",
        "qos": "high",
        "constraints": "a100&ib",
        "standard_output": "/j/%x-%j.out",
        "standard_error": "/j/%x-%j.err",
        "exclude_nodes": "node[1-2]",
        "current_working_directory": "/j",
        "environment": {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "USER": "alice", "SLURM_SUBMIT_DIR": "/s"},
    }


def test_export_none_sends_no_submit_environment() -> None:
    job = job_description(args(export=Export(ExportMode.NONE)), BASE_ENV)["job"]
    assert job["environment"] == {"USER": "alice"}


def test_step_signal_is_sent_and_switches_are_deferred() -> None:
    """v0.0.38 disables required_switches: RestdBackend sets them after the submit."""
    job = job_description(args(signal=Signal("USR1", 120, batch_only=False), switches=Switches(1, 300)), BASE_ENV)
    assert job["job"]["signal"] == "USR1@120" and "switches" not in json.dumps(job)


# ---------------------------------------------------------------- the backend over a fake HTTP client
V38 = "/slurm/v0.0.38"
META = {"meta": {"Slurm": {"release": "22.05.8", "version": {"major": 22, "minor": 5, "micro": 8}}}}


def backend(tmp_path: Path, handler: Any, **cfg: Any) -> RestdBackend:
    return restd_backend(tmp_path, handler, **cfg)


def openapi(paths: list[str]) -> Reply:
    return answer(200, json={"paths": {p: {"get": {}} for p in paths}})


def calls(command: str, outcome: str) -> float:
    labels = {"backend": "slurmrestd", "command": command, "outcome": outcome}
    return REGISTRY.get_sample_value("clusterd_slurm_calls_total", labels) or 0.0


async def test_submit_is_signed_for_the_jobs_user(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.geteuid())
    seen: list[Sent] = []

    def handler(request: Sent) -> Reply:
        seen.append(request)
        if request.path == "/openapi/v3":
            return openapi([f"{V38}/jobs", "/slurm/v0.0.37/jobs", "/slurm/v0.0.99/jobs"])
        # a held job: Slurm sends a job id AND an informational error
        return answer(200, json={**META, "job_id": 42, "errors": [{"error": "Job is in held state"}]})

    b = backend(tmp_path, handler)
    before = calls("POST job/submit", "ok")
    assert await b.submit(args(hold=True, user=me.pw_name)) == "42"
    submit = seen[-1]
    assert (submit.method, submit.path) == ("POST", f"{V38}/job/submit")
    assert submit.headers["X-SLURM-USER-NAME"] == me.pw_name
    claims = jwt.decode(submit.headers["X-SLURM-USER-TOKEN"], KEY, algorithms=["HS256"])
    assert claims["sun"] == me.pw_name and claims["exp"] - claims["iat"] == 600
    assert json.loads(submit.content)["job"]["hold"] is True
    assert calls("POST job/submit", "ok") == before + 1


@pytest.mark.parametrize("api", ["v0.0.38", "v0.0.42", "v0.0.45"])
async def test_jobs_start_with_the_configured_job_path(tmp_path: Path, api: str) -> None:
    """slurm.job_path reaches the job as with sbatch: seen on 24.11's nodes, clusterd's own PATH had no job venv."""
    me = pwd.getpwuid(os.geteuid())
    seen: list[Sent] = []

    def handler(request: Sent) -> Reply:
        seen.append(request)
        return answer(200, json={"job_id": 7})

    b = backend(tmp_path, handler, job_path="/opt/jobenv/bin:/usr/bin:/bin", restd_api_version=api)
    assert await b.submit(args(user=me.pw_name)) == "7"
    job = json.loads(seen[-1].content)["job"]
    env = job["environment"]
    path = env["PATH"] if isinstance(env, dict) else dict(e.split("=", 1) for e in env)["PATH"]
    assert path == "/opt/jobenv/bin:/usr/bin:/bin"


async def test_slurms_errors_become_slurm_error_with_its_words(tmp_path: Path) -> None:
    def handler(request: Sent) -> Reply:
        err = {"errors": [{"error_code": 2000, "error": "Invalid partition name specified"}]}
        return answer(500, json={**META, **err})

    b = backend(tmp_path, handler, restd_api_version="v0.0.38")
    before = calls("POST job/submit", "error")
    with pytest.raises(SlurmError) as info:
        await b.submit(args(partition="nope"))
    assert not isinstance(info.value, SlurmUnavailable)
    assert info.value.detail == "Invalid partition name specified"
    assert "HTTP 500" in str(info.value)
    assert calls("POST job/submit", "error") == before + 1


async def test_controller_down_behind_restd_is_unavailable(tmp_path: Path) -> None:
    def handler(request: Sent) -> Reply:
        err = {"errors": [{"error": "Unable to contact slurm controller (connect failure)"}]}
        return answer(500, json=err)

    with pytest.raises(SlurmUnavailable):
        await backend(tmp_path, handler, restd_api_version="v0.0.38").list_jobs()


async def test_connection_refused_is_unavailable(tmp_path: Path) -> None:
    def handler(request: Sent) -> Reply:
        raise HttpFailure("connection refused")

    before = calls("GET jobs", "unavailable")
    with pytest.raises(SlurmUnavailable):
        await backend(tmp_path, handler, restd_api_version="v0.0.38").list_jobs()
    assert calls("GET jobs", "unavailable") == before + 1


async def test_job_ids_must_be_digits_and_nothing_is_sent(tmp_path: Path) -> None:
    seen: list[Sent] = []

    def handler(request: Sent) -> Reply:
        seen.append(request)
        return answer(200, json={"errors": []})

    b = backend(tmp_path, handler, restd_api_version="v0.0.38")
    for bad in ("1/../../nodes", "12;x", "", "1 2"):
        with pytest.raises(SlurmError):
            await b.cancel(bad)
        with pytest.raises(SlurmError):
            await b.update_job(bad, start_after=0)
    assert seen == []


async def test_update_body_and_version(tmp_path: Path) -> None:
    seen: list[Sent] = []

    def handler(request: Sent) -> Reply:
        seen.append(request)
        return answer(200, json={**META, "errors": []})

    b = backend(tmp_path, handler, restd_api_version="v0.0.38")
    await b.update_job("7", exclude_nodes=("node1", "node3"), start_after=3)
    assert (seen[-1].method, seen[-1].path) == ("POST", f"{V38}/job/7")
    assert json.loads(seen[-1].content) == {"exclude_nodes": "node1,node3", "begin_time": "now+3"}
    assert seen[-1].headers["X-SLURM-USER-NAME"] == "root"
    await b.update_job("7", start_after=0)
    assert json.loads(seen[-1].content) == {"begin_time": "now"}
    assert await b.version() == "22.05.8"


async def test_unknown_server_api_is_refused(tmp_path: Path) -> None:
    b = backend(tmp_path, lambda request: openapi(["/slurm/v0.0.99/jobs"]))
    with pytest.raises(SlurmError, match=r"v0\.0\.99"):
        await b.partitions()


async def test_a_request_the_api_cannot_carry_is_submitted_with_sbatch(tmp_path: Path) -> None:
    """v0.0.38 cannot send B:USR1 to the batch shell: the commands backend (sbatch) submits it, and
    nothing is POSTed."""

    class Sbatch:
        requests: list[JobRequest] = []

        async def submit(self, request: JobRequest) -> str:
            self.requests.append(request)
            return "77"

    posts: list[str] = []

    def handler(request: Sent) -> Reply:
        if request.method == "POST":
            posts.append(request.path)
        return openapi([f"{V38}/jobs"]) if request.path == "/openapi/v3" else answer(200, json=META)

    rb = backend(tmp_path, handler)
    sbatch = Sbatch()
    rb._fallback = sbatch  # type: ignore[assignment]
    me = pwd.getpwuid(os.geteuid()).pw_name
    req = args(user=me, signal=Signal("USR1", 120))
    before = calls("POST job/submit", "ok")
    assert await rb.submit(req) == "77"
    assert sbatch.requests == [req] and posts == []
    assert calls("POST job/submit", "ok") == before  # no slurmrestd call is counted for it
