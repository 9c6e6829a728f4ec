"""Hostile job specs: validation only ever raises InvalidArgument, and what passes reaches sbatch as data.

Fixed budget (max_examples, no deadline) so the module runs in a few seconds in CI.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.api.spec_convert import spec_from_proto
from clusterd.config import LimitsConfig
from clusterd.errors import InvalidArgument
from clusterd.jobs import validate
from clusterd.jobs.directives import header_end, parse_directives
from clusterd.jobs.script import inject_environment, job_environment
from clusterd.slurm.argv import sbatch_argv
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.request import JobRequest
from clusterd.slurm.types import ClusterFacts
from tests.clusterd.conftest import USER_A, auth, base_config, running, stub

FACTS = ClusterFacts(
    partitions=frozenset({"debug", "batch"}),
    nodes=frozenset(f"node{i}" for i in range(1, 7)),
    default_partition="debug",
)
LIMITS = LimitsConfig(max_script_bytes=8192)


def validate_spec(wire: jobs_pb2.JobSpec, facts: ClusterFacts, limits: LimitsConfig) -> JobRequest:
    """The spec as a submission's: through the API's conversion, then validation."""
    return validate.validate_spec(spec_from_proto(wire), facts, limits)


BUDGET = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HOSTILE = [
    "$(id)",
    "`id`",
    "; rm -rf / #",
    "a\nb",
    "\x00",
    "' '",
    '"',
    "\\",
    "${IFS}cat${IFS}/etc/passwd",
    "--uid=0",
    "-o/etc/passwd",
    "\n#SBATCH --uid=0",
    "%x%j",
    "../../etc/shadow",
    "&& true",
    "| sh",
    "*",
    "~root",
    "\r",
    "x' ; id ; '",
    "$HOME",
    "!!",
    "\u202e",
    "a=b",
    "--",
    "-",
    "/bin/sh -c id",
    "debug,batch",
    "node1;node2",
]
_chars = st.characters(blacklist_categories=("Cs",))
TEXT = st.one_of(
    st.text(_chars, max_size=30),
    st.sampled_from(HOSTILE),
    st.builds(lambda a, b: a + b, st.sampled_from(HOSTILE), st.text(_chars, max_size=8)),
)
SAFE_NAME = st.sampled_from(["", "debug", "batch", "node1", "a.b-c_d"])
DIRECTIVE_NAMES = [
    "nodes",
    "N",
    "ntasks-per-node",
    "time",
    "t",
    "partition",
    "gres",
    "job-name",
    "output",
    "chdir",
    "uid",
    "gid",
    "export",
    "export-file",
    "wrap",
    "get-user-env",
    "cpus-per-task",
    "comment",
    "x",
    "par",
    "array",
    "a",
    "bbf",
    "F",
    "W",
    "nice",
    "priority",
    "signal",
    "dependency",
    "mem",
]
ENV_NAME = st.one_of(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,10}\Z"), TEXT)


@st.composite
def scripts(draw: st.DrawFn) -> str:
    lines = [draw(st.sampled_from(["#!/bin/bash", "#!/bin/sh", "", "echo", "#!"]))]
    for _ in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(DIRECTIVE_NAMES))
        dash = "-" if len(name) == 1 else "--"
        sep = draw(st.sampled_from(["=", " ", ""]))
        family = draw(st.sampled_from(["#SBATCH", "#SBATCH", "#SLURM", "#PBS", "#BSUB"]))
        lines.append(f"{family} {dash}{name}{sep}{draw(TEXT)}")
    lines.append(draw(TEXT))
    return "\n".join(lines) + "\n"


@st.composite
def specs(draw: st.DrawFn) -> jobs_pb2.JobSpec:
    kw: dict[str, Any] = {}
    if draw(st.booleans()):
        kw["script"] = draw(scripts())
    else:
        kw["command"] = draw(st.lists(TEXT, min_size=0, max_size=4))
    for name in (
        "name",
        "time_limit",
        "working_directory",
        "stdout_path",
        "stderr_path",
        "checkpoint_uri",
        "request_id",
    ):
        if draw(st.booleans()):
            kw[name] = draw(st.one_of(TEXT, st.sampled_from(["/tmp/x", "10:00", "s3://bucket/p", "run-1"])))
    for name in ("partition", "account", "qos"):
        kw[name] = draw(st.one_of(SAFE_NAME, TEXT))
    for name in ("nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "memory_mb_per_node"):
        kw[name] = draw(st.one_of(st.integers(0, 8), st.integers(0, 2**31 - 1)))
    kw["environment"] = draw(st.dictionaries(ENV_NAME, TEXT, max_size=4))
    kw["placement"] = cluster_pb2.PlacementPreference(
        exclude_nodes=draw(st.lists(st.one_of(SAFE_NAME, TEXT), max_size=2)),
        constraints=draw(st.lists(st.one_of(SAFE_NAME, TEXT), max_size=2)),
    )
    return jobs_pb2.JobSpec(**kw)


_OPTION = re.compile(r"\A--[a-z][a-z-]*(=[^\n\r\x00]*)?\Z")


def check_request(req: JobRequest) -> None:
    """sbatch gets single --name=value tokens, and the script it reads carries no directive at all."""
    argv = sbatch_argv(req)
    assert argv[:3] == ["sbatch", "--parsable", "--ignore-pbs"]
    for opt in argv[3:]:
        assert _OPTION.match(opt), f"not a single --name=value token: {opt!r}"
    assert parse_directives(req.script) == []
    lines = req.script.split("\n")
    header = lines[: header_end(lines)]  # sbatch reads no further: later "#SBATCH" text is data
    assert not [ln for ln in header if ln.startswith(("#SBATCH", "#SLURM", "#PBS", "#BSUB"))]


def env_block(script: str) -> str:
    """The injected export line(s): after the header, up to clusterd's marker (values may hold newlines)."""
    end = script.rindex("  # environment added by clusterd")
    start = script.index("\nexport ") + 1
    return script[start:end]


@BUDGET
@given(specs())
def test_validation_only_raises_invalid_argument(spec: jobs_pb2.JobSpec) -> None:
    try:
        job = validate_spec(spec, FACTS, LIMITS)
    except InvalidArgument:
        return
    check_request(replace(job, user="u", comment="clusterd:1"))
    script = inject_environment(
        job.script, job_environment(dict(job.export.variables), record_id=1, checkpoint_uri=spec.checkpoint_uri)
    )
    assert "\x00" not in script


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"\A[A-Z][A-Z0-9_]{0,8}\Z").filter(
            lambda n: not n.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "CLUSTERCTL_"))
        ),
        TEXT.filter(lambda v: "\x00" not in v),
        min_size=1,
        max_size=3,
    )
)
def test_environment_reaches_the_job_verbatim(env: dict[str, str]) -> None:
    """The export lines are valid bash and each variable reads back byte for byte; nothing runs."""
    spec = jobs_pb2.JobSpec(command=["true"], environment=env)
    job = validate_spec(spec, FACTS, LIMITS)
    # The whole block (quoted values may span lines); its runtime part is inert without a checkpoint URI.
    env_vars = job_environment(dict(job.export.variables), record_id=7, checkpoint_uri="")
    block = env_block(inject_environment(job.script, env_vars))
    assert subprocess.run(["bash", "-n"], input=block, text=True).returncode == 0
    for name, value in env.items():
        out = subprocess.run(
            ["bash", "-c", f"{block}\nprintenv -0 {name}"], capture_output=True, env={}, timeout=10
        ).stdout
        assert out == value.encode() + b"\x00"


STRING_FIELDS = [
    "name",
    "partition",
    "account",
    "qos",
    "time_limit",
    "working_directory",
    "stdout_path",
    "stderr_path",
    "checkpoint_uri",
    "request_id",
    "command",
    "env_value",
    "env_name",
    "exclude",
    "constraint",
]


def hostile_spec(field: str, value: str) -> jobs_pb2.JobSpec:
    spec = jobs_pb2.JobSpec(command=["hostname"])
    if field == "command":
        spec.command.append(value)
    elif field == "env_value":
        spec.environment["HOSTILE"] = value
    elif field == "env_name":
        spec.environment[value] = "x"
    elif field == "exclude":
        spec.placement.exclude_nodes.append(value)
    elif field == "constraint":
        spec.placement.constraints.append(value)
    else:
        setattr(spec, field, value)
    return spec


async def test_shell_metacharacters_in_every_string_field_reach_sbatch_as_data(tmp_path: Path) -> None:
    slurm = FakeSlurm.cluster()
    cfg = base_config(tmp_path, requests_per_second=0, max_jobs_per_user=0)
    accepted = 0
    async with running(cfg, slurm) as daemon, grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
        jobs = stub(ch)
        for field in STRING_FIELDS:
            for value in HOSTILE:
                before = len(slurm.submitted)
                try:
                    await jobs.SubmitJob(
                        jobs_pb2.SubmitJobRequest(spec=hostile_spec(field, value)), metadata=auth(USER_A)
                    )
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, value, exc.details())
                    assert len(slurm.submitted) == before
                    continue
                accepted += 1
                req = slurm.submitted[-1]
                check_request(req)
                block = env_block(req.script)
                assert subprocess.run(["bash", "-n"], input=block, text=True).returncode == 0
                if field == "env_value":
                    out = subprocess.run(
                        ["bash", "-c", f"{block}\nprintenv -0 HOSTILE"], capture_output=True, env={}, timeout=10
                    ).stdout
                    assert out == value.encode() + b"\x00"
    assert accepted > 20  # the test is not vacuous: many hostile values are legal data


# sbatch accepts any unambiguous prefix of a long option (getopt_long), also in #SBATCH lines
# (refused since 35f6a4e; before it, these abbreviations passed validation).
@pytest.mark.parametrize(
    "directive",
    [
        "--export-fi=/etc/shadow",
        "--get-user",
        "--ui=0",
        "--bb=x",
        "--bbf=/etc/shadow",
        "--pri=1",
        "--reb",
        "--par=debug",
        "-W",
        "-F /etc/hosts",
        "-HW",  # a cluster of short options: -H, then -W (refused)
    ],
)
def test_abbreviated_forbidden_directives_are_refused(directive: str) -> None:
    spec = jobs_pb2.JobSpec(script=f"#!/bin/bash\n# comment\n#SBATCH {directive}\nid\n")
    with pytest.raises(InvalidArgument, match="script line 3"):
        validate_spec(spec, FACTS, LIMITS)


# Fails on jobs/script.py versions that rebuilt the script with str.splitlines(), which also splits on
# \x0c, \x1c-\x1e, \x85, \u2028/\u2029 and so changed the user's script bytes.
def test_injection_keeps_the_user_script_byte_for_byte() -> None:
    body = 'echo "a\u2028b\x0cc"\n'
    script = inject_environment("#!/bin/bash\n" + body, {"X": "1"})
    assert script.endswith(body)
