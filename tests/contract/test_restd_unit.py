"""slurmrestd backend without a server: the option -> v0.0.38 JSON mapping and HTTP handling (fast)."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import httpx
import jwt
import pytest

from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError, SlurmUnavailable
from clusterd.observability.metrics import REGISTRY
from clusterd.slurm.restd import RestdBackend
from clusterd.slurm.restd_submit import deferred_switches, job_description
from clusterd.slurm.types import SubmitArgs

BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
SCRIPT = "#!/bin/bash\necho hi\n"


def args(*options: str, script: str = SCRIPT, **kw: object) -> SubmitArgs:
    return SubmitArgs(options=options, script=script, **kw)  # type: ignore[arg-type]


def test_every_service_option_maps() -> None:
    body = job_description(
        args(
            "--job-name=train",
            "--nodes=2",
            "--ntasks-per-node=4",
            "--cpus-per-task=2",
            "--gres=gpu:4",
            "--gpus-per-node=4",
            "--requeue",
            "--open-mode=append",
            "--export=ALL",
            "--comment=clusterd:7",
            "--mem=2G",
            "--time=1:00:00",
            "--signal=USR1@120",
            "--partition=batch",
            "--account=ml",
            "--qos=high",
            "--constraint=a100&ib",
            "--output=/j/%x-%j.out",
            "--error=/j/%x-%j.err",
            "--exclude=node1,node2",
            "--chdir=/j",
            environment={"USER": "alice", "PATH": "/opt/bin"},
        ),
        BASE_ENV,
    )
    assert body["script"] == SCRIPT
    assert body["job"] == {
        "name": "train", "nodes": "2", "tasks_per_node": 4, "cpus_per_task": 2, "gres": "gpu:4",
        "gpus_per_node": "4", "requeue": True, "open_mode": "append", "comment": "clusterd:7",
        "memory_per_node": 2048, "time_limit": "1:00:00", "signal": "USR1@120", "partition": "batch",
        "account": "ml", "qos": "high", "constraints": "a100&ib", "standard_output": "/j/%x-%j.out",
        "standard_error": "/j/%x-%j.err", "exclude_nodes": "node1,node2", "current_working_directory": "/j",
        "environment": {"PATH": "/opt/bin", "LANG": "C.UTF-8", "USER": "alice"},
    }  # fmt: skip


def test_script_directives_apply_and_options_override_them() -> None:
    script = "#!/bin/bash\n#SBATCH -N 4\n#SBATCH --time=10\n#SBATCH -J fromscript\n#SBATCH --mem=512\necho\n"
    job = job_description(args("--time=20", "--nodes=2-4", script=script, working_directory="/w"), BASE_ENV)["job"]
    assert (job["nodes"], job["time_limit"], job["name"], job["memory_per_node"]) == ("2-4", "20", "fromscript", 512)
    assert job["current_working_directory"] == "/w"
    # an explicit --chdir option wins over working_directory, as on sbatch's command line
    assert (
        job_description(args("--chdir=/x", working_directory="/w"), BASE_ENV)["job"]["current_working_directory"]
        == "/x"
    )


@pytest.mark.parametrize(
    ("options", "script", "named"),
    [
        ((), "#!/bin/bash\n#SBATCH --signal=B:USR1@60\necho\n", "--signal"),
        (("--signal=R:USR1@120",), SCRIPT, "--signal"),
        (("--tres-per-node=gres/gpu:4",), SCRIPT, "--tres-per-node"),
        (("--export=NONE",), SCRIPT, "--export"),
        (("--frobnicate=1",), SCRIPT, "--frobnicate"),
        (("-N2",), SCRIPT, "-N2"),
        (("--mem=lots",), SCRIPT, "--mem"),
        (("--ntasks-per-node=four",), SCRIPT, "--ntasks-per-node"),
        (("--open-mode=sideways",), SCRIPT, "--open-mode"),
        (("--requeue=yes",), SCRIPT, "--requeue"),
        (("--switches=two",), SCRIPT, "--switches"),
        ((), "#!/bin/bash\n#SBATCH --uid=0\necho\n", "--uid"),
    ],
)
def test_unexpressible_options_are_refused_by_name(options: tuple[str, ...], script: str, named: str) -> None:
    with pytest.raises(SlurmError) as info:
        job_description(args(*options, script=script), BASE_ENV)
        deferred_switches(args(*options, script=script))
    assert named in str(info.value) and named in info.value.detail
    assert "not sent" in str(info.value)


def test_service_warning_signal_goes_to_steps_and_switches_are_deferred() -> None:
    """v0.0.38 refuses B: and disables required_switches: the service's own options are adapted."""
    script = "#!/bin/bash\n#SBATCH --switches=2@60\necho\n"
    a = args("--signal=B:USR1@120", "--switches=1@300", script=script)
    job = job_description(a, BASE_ENV)["job"]
    assert job["signal"] == "USR1@120" and "switches" not in json.dumps(job)
    assert deferred_switches(a) == "1@300"  # the service's option wins over the script's line
    assert deferred_switches(args(script=script)) == "2@60"
    assert deferred_switches(args()) is None


# ---------------------------------------------------------------- the backend over a mock transport
KEY = b"k" * 32
V38 = "/slurm/v0.0.38"
META = {"meta": {"Slurm": {"release": "22.05.8", "version": {"major": 22, "minor": 5, "micro": 8}}}}


def backend(tmp_path: Path, handler: object, **cfg: object) -> RestdBackend:
    key = tmp_path / "jwt.key"
    key.write_bytes(KEY)
    config = SlurmConfig(restd_url="http://restd.invalid:6820", jwt_key_file=str(key), **cfg)  # type: ignore[arg-type]
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url=config.restd_url)  # type: ignore[arg-type]
    return RestdBackend(config, client=client)


def openapi(paths: list[str]) -> httpx.Response:
    return httpx.Response(200, json={"paths": {p: {"get": {}} for p in paths}})


def calls(command: str, outcome: str) -> float:
    labels = {"backend": "slurmrestd", "command": command, "outcome": outcome}
    return REGISTRY.get_sample_value("clusterd_slurm_calls_total", labels) or 0.0


async def test_submit_is_signed_for_the_jobs_user(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.geteuid())
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/openapi/v3":
            return openapi([f"{V38}/jobs", "/slurm/v0.0.37/jobs", "/slurm/v0.0.99/jobs"])
        # a held job: Slurm sends a job id AND an informational error
        return httpx.Response(200, json={**META, "job_id": 42, "errors": [{"error": "Job is in held state"}]})

    b = backend(tmp_path, handler)
    before = calls("POST job/submit", "ok")
    assert await b.submit(args("--hold", uid=me.pw_uid, gid=me.pw_gid)) == "42"
    submit = seen[-1]
    assert (submit.method, submit.url.path) == ("POST", f"{V38}/job/submit")
    assert submit.headers["X-SLURM-USER-NAME"] == me.pw_name
    claims = jwt.decode(submit.headers["X-SLURM-USER-TOKEN"], KEY, algorithms=["HS256"])
    assert claims["sun"] == me.pw_name and claims["exp"] - claims["iat"] == 600
    assert json.loads(submit.content)["job"]["hold"] is True
    assert calls("POST job/submit", "ok") == before + 1


async def test_slurms_errors_become_slurm_error_with_its_words(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        err = {"errors": [{"error_code": 2000, "error": "Invalid partition name specified"}]}
        return httpx.Response(500, json={**META, **err})

    b = backend(tmp_path, handler, restd_api_version="v0.0.38")
    before = calls("POST job/submit", "error")
    with pytest.raises(SlurmError) as info:
        await b.submit(args("--partition=nope"))
    assert not isinstance(info.value, SlurmUnavailable)
    assert info.value.detail == "Invalid partition name specified"
    assert "HTTP 500" in str(info.value)
    assert calls("POST job/submit", "error") == before + 1


async def test_controller_down_behind_restd_is_unavailable(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        err = {"errors": [{"error": "Unable to contact slurm controller (connect failure)"}]}
        return httpx.Response(500, json=err)

    with pytest.raises(SlurmUnavailable):
        await backend(tmp_path, handler, restd_api_version="v0.0.38").list_jobs()


async def test_connection_refused_is_unavailable(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    before = calls("GET jobs", "unavailable")
    with pytest.raises(SlurmUnavailable):
        await backend(tmp_path, handler, restd_api_version="v0.0.38").list_jobs()
    assert calls("GET jobs", "unavailable") == before + 1


async def test_job_ids_must_be_digits_and_nothing_is_sent(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"errors": []})

    b = backend(tmp_path, handler, restd_api_version="v0.0.38")
    for bad in ("1/../../nodes", "12;x", "", "1 2"):
        with pytest.raises(SlurmError):
            await b.cancel(bad)
        with pytest.raises(SlurmError):
            await b.update_job(bad, start_after=0)
    assert seen == []


async def test_update_body_and_version(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={**META, "errors": []})

    b = backend(tmp_path, handler, restd_api_version="v0.0.38")
    await b.update_job("7", exclude_nodes=("node1", "node3"), start_after=3)
    assert (seen[-1].method, seen[-1].url.path) == ("POST", f"{V38}/job/7")
    assert json.loads(seen[-1].content) == {"exclude_nodes": "node1,node3", "begin_time": "now+3"}
    assert seen[-1].headers["X-SLURM-USER-NAME"] == "root"
    await b.update_job("7", start_after=0)
    assert json.loads(seen[-1].content) == {"begin_time": "now"}
    assert await b.version() == "22.05.8"


async def test_unknown_server_api_is_refused(tmp_path: Path) -> None:
    b = backend(tmp_path, lambda request: openapi(["/slurm/v0.0.99/jobs"]))
    with pytest.raises(SlurmError, match=r"v0\.0\.99"):
        await b.partitions()
