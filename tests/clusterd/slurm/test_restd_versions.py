"""slurmrestd data_parser versions (v0.0.40..v0.0.45) without a server: request bodies and detection.

The bodies are checked against the documented JOB_DESC_MSG keys (see restd_versions' docstring);
the backend runs over a fake HTTP client (tests.support.backends) serving documented 26.05
responses (tests/fixtures/slurm, ``*_26.05_documented_*``: built from Slurm's schemas, not captured).
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Any

import jwt
import pytest

from clusterd.errors import SlurmError
from clusterd.slurm.request import ArraySpec, JobRequest, Sharing, Signal, Switches
from clusterd.slurm.restd import RestdBackend
from clusterd.slurm.restd_http import Reply
from clusterd.slurm.restd_versions import INFINITE, KNOWN_API_VERSIONS, api_for, choose, number
from clusterd.slurm.types import JobState, NodeState
from tests.support.backends import RESTD_KEY as KEY
from tests.support.backends import Sent, answer, restd_backend
from tests.support.paths import SLURM_FIXTURES

BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
SCRIPT = "#!/bin/bash\necho hi\n"
NOW = 1_700_000_000.0
DATA_PARSER = [v for v in KNOWN_API_VERSIONS if v != "v0.0.38"]


def args(script: str = SCRIPT, **fields: object) -> JobRequest:
    return JobRequest(
        script=script, name=str(fields.pop("name", "job")), user=str(fields.pop("user", "alice")), **fields
    )  # type: ignore[arg-type]


def body(version: str, a: JobRequest) -> dict[str, Any]:
    return api_for(version).submit_body(a, BASE_ENV, now=NOW)


def test_known_versions_and_choice() -> None:
    assert KNOWN_API_VERSIONS == ("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
    assert choose({"v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"}) == "v0.0.45"
    assert choose({"v0.0.38", "v0.0.39"}) == "v0.0.38"  # 23.02's v0.0.39 is not spoken
    assert choose({"v0.0.39", "v0.0.99"}) is None


@pytest.mark.parametrize("version", DATA_PARSER)
def test_every_field_maps_to_the_documented_keys(version: str) -> None:
    b = body(
        version,
        args(
            name="train",
            nodes=2,
            tasks_per_node=4,
            cpus_per_task=2,
            gpus_per_node=4,
            comment="clusterd:7",
            memory_mb_per_node=2048,
            time_limit_seconds=3600,
            signal=Signal("USR1", 120),
            switches=Switches(1, 300),
            partition="batch",
            account="ml",
            qos="high",
            constraint="a100&ib",
            stdout="/j/%x-%j.out",
            stderr="/j/%x-%j.err",
            exclude=("node1", "node3"),
            working_directory="/j",
            submit_directory="/s",
        ),
    )
    assert b["script"] == SCRIPT
    # From v0.0.42 the job says OOMKillStep is unset (NO_VAL16), as sbatch leaves it.
    assert b["job"].pop("oom_kill_step", None) == (0xFFFE if api_for(version).oom_kill_step_key else None)
    assert b["job"] == {
        "name": "train",
        "nodes": "2",
        "tasks_per_node": 4,
        "cpus_per_task": 2,
        "tres_per_node": "gres/gpu:4",
        "requeue": True,
        "open_mode": ["APPEND"],
        "comment": "clusterd:7",
        "memory_per_node": number(2048),
        "time_limit": number(60),
        # B: is expressible from v0.0.40 on: the batch shell gets USR1 120 s before the limit
        "kill_warning_flags": ["BATCH_JOB"],
        "kill_warning_signal": "USR1",
        "kill_warning_delay": number(120),
        # --switches is a live key: no scontrol update after the submit
        "required_switches": number(1),
        "wait_for_switch": 300,
        "partition": "batch",
        "account": "ml",
        "qos": "high",
        "constraints": "a100&ib",
        "standard_output": "/j/%x-%j.out",
        "standard_error": "/j/%x-%j.err",
        "excluded_nodes": ["node1", "node3"],
        "current_working_directory": "/j",
        "environment": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8", "USER=alice", "SLURM_SUBMIT_DIR=/s"],
        "script": SCRIPT,
    }
    assert not api_for(version).defers_switches


def test_hold_is_a_key_from_v0041_and_priority_zero_before() -> None:
    assert body("v0.0.45", args(hold=True))["job"]["hold"] is True
    assert body("v0.0.41", args(hold=True))["job"]["hold"] is True
    job40 = body("v0.0.40", args(hold=True))["job"]
    assert job40["priority"] == 0 and "hold" not in job40


def test_value_conversions() -> None:
    job = body(
        "v0.0.45",
        args(
            nodes=2,
            max_nodes=4,
            gpus_per_node=4,
            gpu_type="a100",
            sharing=Sharing.EXCLUSIVE,
            begin="now+1hour",
            time_limit_seconds=61,
            memory_mb_per_cpu=512,
            gpus=8,
            array=ArraySpec((0, 1, 2, 5), 2),
        ),
    )["job"]
    assert job["nodes"] == "2-4"
    assert job["tres_per_node"] == "gres/gpu:a100:4" and job["tres_per_job"] == "gres/gpu:a100:8"
    assert job["shared"] == ["none"]
    assert job["begin_time"] == number(int(NOW) + 3600)
    assert job["time_limit"] == number(2)  # 61 s rounds up to 2 minutes, as Slurm does
    assert job["memory_per_cpu"] == number(512)
    assert job["array"] == "0-2,5%2"
    assert body("v0.0.43", args(time_unlimited=True))["job"]["time_limit"] == INFINITE
    assert "kill_warning_flags" not in body("v0.0.44", args(signal=Signal("USR1", 90, batch_only=False)))["job"]


@pytest.mark.parametrize(
    ("fields", "named"), [({"mail_type": ("END",)}, "--mail-type"), ({"begin": "tomorrow"}, "--begin")]
)
def test_unexpressible_values_are_refused_by_name(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(SlurmError) as info:
        body("v0.0.45", args(**fields))
    assert named in info.value.detail and "not sent" in str(info.value)


@pytest.mark.parametrize("version", DATA_PARSER)
def test_update_bodies(version: str) -> None:
    api = api_for(version)
    assert api.update_body(exclude_nodes=("node1", "node3"), start_after=3, now=NOW) == {
        "excluded_nodes": ["node1", "node3"],
        "begin_time": number(int(NOW) + 3),
    }
    assert api.update_body(exclude_nodes=(), start_after=0, now=NOW) == {
        "excluded_nodes": "",
        "begin_time": number(int(NOW)),
    }
    assert api_for("v0.0.38").update_body(exclude_nodes=(), start_after=0) == {"exclude_nodes": "", "begin_time": "now"}


# ---------------------------------------------------------------- the backend over a fake HTTP client


def fixture(name: str) -> Any:
    return json.loads((SLURM_FIXTURES / name).read_text())


class NoCommands:
    """Stands in for the commands fallback: a data_parser submit must not need scontrol."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"commands backend used: {name}")


def backend(tmp_path: Path, handler: Any, **cfg: Any) -> RestdBackend:
    return restd_backend(tmp_path, handler, fallback=NoCommands(), **cfg)


def slurm_26_05(seen: list[Sent]) -> Any:
    responses = {
        ("GET", "/openapi/v3"): fixture("restd_openapi_26.05_documented_paths.json"),
        ("POST", "/slurm/v0.0.45/job/submit"): fixture("restd_submit_26.05_documented_response.json"),
        ("GET", "/slurm/v0.0.45/jobs"): fixture("squeue_26.05_documented_jobs.json"),
        ("GET", "/slurm/v0.0.45/nodes"): fixture("restd_nodes_26.05_documented_node_down.json"),
        ("GET", "/slurm/v0.0.45/ping"): fixture("restd_ping_26.05_documented.json"),
        ("GET", "/slurm/v0.0.45/partitions"): fixture("restd_partitions_26.05_documented.json"),
    }

    def handler(request: Sent) -> Reply:
        seen.append(request)
        path = request.path
        if request.method in ("POST", "DELETE") and path.startswith("/slurm/v0.0.45/job/") and path[19:].isdigit():
            return answer(200, json={"results": [], "errors": [], "warnings": []})
        known = responses.get((request.method, request.path))
        return answer(200, json=known) if known else answer(404, text="no such path")

    return handler


async def test_detects_v0045_and_submits_the_documented_body(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.geteuid())
    seen: list[Sent] = []
    b = backend(tmp_path, slurm_26_05(seen))
    a = args(nodes=2, gpus_per_node=4, signal=Signal("USR1", 120), switches=Switches(1, 300), user=me.pw_name)
    assert await b.submit(a) == "4711"
    assert [(r.method, r.path) for r in seen] == [("GET", "/openapi/v3"), ("POST", "/slurm/v0.0.45/job/submit")]
    submit = seen[-1]
    assert submit.headers["X-SLURM-USER-NAME"] == me.pw_name
    assert jwt.decode(submit.headers["X-SLURM-USER-TOKEN"], KEY, algorithms=["HS256"])["sun"] == me.pw_name
    sent = json.loads(submit.content)
    assert sent["script"] == SCRIPT and sent["job"]["script"] == SCRIPT
    assert sent["job"]["kill_warning_flags"] == ["BATCH_JOB"]
    assert sent["job"]["required_switches"] == number(1)
    assert sent["job"]["tres_per_node"] == "gres/gpu:4"
    assert all(isinstance(e, str) and "=" in e for e in sent["job"]["environment"])


async def test_reads_update_cancel_and_version_over_v0045(tmp_path: Path) -> None:
    seen: list[Sent] = []
    b = backend(tmp_path, slurm_26_05(seen))
    jobs = {j.job_id: j for j in await b.list_jobs()}
    assert jobs["24"].state is JobState.RUNNING and jobs["24"].nodes == ("node2", "node3")
    assert jobs["32"].state is JobState.PENDING and jobs["32"].restart_count == 1
    nodes = {n.name: n for n in await b.list_nodes()}
    assert nodes["node4"].state is NodeState.DOWN
    assert await b.version() == "26.05.0"
    assert await b.partitions() == ["debug", "batch"]
    await b.update_job("32", exclude_nodes=("node4",), start_after=0)
    update = seen[-1]
    assert (update.method, update.path) == ("POST", "/slurm/v0.0.45/job/32")
    sent = json.loads(update.content)
    assert sent["excluded_nodes"] == ["node4"] and sent["begin_time"]["set"] is True
    await b.cancel("32")
    assert (seen[-1].method, seen[-1].path) == ("DELETE", "/slurm/v0.0.45/job/32")
    assert sum(r.path == "/openapi/v3" for r in seen) == 1  # detected once


async def test_configured_version_skips_detection(tmp_path: Path) -> None:
    seen: list[Sent] = []

    def handler(request: Sent) -> Reply:
        seen.append(request)
        return answer(200, json={"job_id": 9, "errors": [], "warnings": []})

    b = backend(tmp_path, handler, restd_api_version="v0.0.42")
    assert await b.submit(args(time_limit_seconds=300, user=pwd.getpwuid(os.geteuid()).pw_name)) == "9"
    assert [r.path for r in seen] == ["/slurm/v0.0.42/job/submit"]
    assert json.loads(seen[0].content)["job"]["time_limit"] == number(5)


async def test_server_with_only_unknown_versions_is_a_clear_error(tmp_path: Path) -> None:
    paths = {"paths": {"/slurm/v0.0.39/jobs": {}, "/slurm/v0.0.46/jobs": {}, "/openapi/v3": {}}}
    b = backend(tmp_path, lambda request: answer(200, json=paths))
    with pytest.raises(SlurmError) as info:
        await b.list_jobs()
    text = str(info.value)
    assert "v0.0.39" in text and "v0.0.46" in text  # what the server offers
    assert "v0.0.38" in text and "v0.0.45" in text  # what clusterd speaks
