"""Every JobRequest field is rendered by every backend: a new field without a renderer fails here."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from clusterd.slurm import argv, pyslurm_backend, restd_submit, restd_versions
from clusterd.slurm.request import ArraySpec, Export, ExportMode, JobRequest, Sharing, Signal, Switches

FULL = JobRequest(
    script="#!/bin/bash\ntrue\n",
    name="train",
    user="root",
    comment="clusterctl-record:7",
    partition="batch",
    account="ml",
    qos="high",
    reservation="maint",
    nodes=2,
    max_nodes=4,
    ntasks=8,
    tasks_per_node=4,
    cpus_per_task=2,
    gpus=8,
    gpus_per_node=4,
    gpu_type="a100",
    memory_mb_per_node=2048,
    memory_mb_per_cpu=512,
    time_limit_seconds=3600,
    time_unlimited=False,
    constraint="ib&a100",
    nodelist=("node1", "node2"),
    exclude=("node5",),
    switches=Switches(1, 300),
    working_directory="/home/alice/run",
    submit_directory="/home/alice",
    stdout="out-%j.txt",
    stderr="err-%j.txt",
    stdin="in.txt",
    array=ArraySpec((0, 1, 2, 3), 2),
    dependency="afterok:12",
    begin="now+60",
    hold=True,
    sharing=Sharing.USER,
    mail_type=("END",),
    mail_user="alice",
    nice=10,
    requeue=True,
    open_append=True,
    signal=Signal("USR1", 120),
    export=Export(ExportMode.ALL, {"A": "1"}),
    gpus_per_task=2,
    cpus_per_gpu=4,
    memory_mb_per_gpu=1024,
    tasks_per_gpu=1,
    tasks_per_core=1,
    gpu_bind="closest",
    gres_flags="enforce-binding",
    hint="nomultithread",
    distribution="cyclic",
    sockets_per_node=1,
    cores_per_socket=2,
    threads_per_core=1,
    min_cpus_per_node=2,
    contiguous=True,
    spread_job=True,
    kill_on_invalid_dep=True,
    deadline="now+2hours",
    time_min_seconds=1800,
    wckey="proj",
    tmp_mb=100,
    tasks_per_socket=1,
    gpus_per_socket=1,
    delay_boot_seconds=600,
    overcommit=True,
    no_kill=True,
    use_min_nodes=True,
    wait_all_nodes=True,
    mem_bind="local",
    acctg_freq="task=30",
    licenses="fluent:2",
    batch_features="a100",
)
FIELDS = {f.name for f in dataclasses.fields(JobRequest)}
# Fields whose value another field's renderer carries (e.g. -N MIN-MAX), per backend.
CARRIED = {"max_nodes": "nodes", "gpu_type": "gpus", "time_unlimited": "time_limit_seconds"}


def _sbatch(req: JobRequest) -> Any:
    return argv.sbatch_argv(req), req.script, req.user, req.submit_directory  # stdin, run-as, cwd


def _restd38(req: JobRequest) -> Any:
    return restd_submit.job_description(req, {"PATH": "/bin"}), req.user, req.switches  # token user, deferred


def _restd41(req: JobRequest) -> Any:
    return restd_versions.api_for("v0.0.41").submit_body(req, {"PATH": "/bin"}, now=1e9), req.user


def _restd40(req: JobRequest) -> Any:
    return restd_versions.api_for("v0.0.40").submit_body(req, {"PATH": "/bin"}, now=1e9), req.user


def _pyslurm(req: JobRequest) -> Any:
    return pyslurm_backend.submit_attributes(req)


BACKENDS = {
    "sbatch": (_sbatch, argv.SBATCH_RENDERERS),
    "restd-v0.0.38": (_restd38, restd_submit.RENDERERS),
    "restd-v0.0.41": (_restd41, restd_versions.DP_RENDERERS),
    "restd-v0.0.40": (_restd40, restd_versions.DP_RENDERERS),
    "pyslurm": (_pyslurm, pyslurm_backend.RENDERERS),
}
# What a backend refuses (RestdBackend then submits with sbatch), tested below: left out of FULL there.
_DP_BY_SBATCH = {
    "mail_type": (),
    "gpu_bind": "",
    "gres_flags": "",
    "hint": "",
    "distribution": "",
    "min_cpus_per_node": None,
    "spread_job": False,
    "tmp_mb": None,
    "delay_boot_seconds": None,
    "overcommit": False,
    "no_kill": False,
    "use_min_nodes": False,
    "wait_all_nodes": None,
    "mem_bind": "",
    "acctg_freq": "",
    "batch_features": "",
    "cores_per_socket": None,
}
REFUSED: dict[str, dict[str, Any]] = {
    "restd-v0.0.41": _DP_BY_SBATCH,
    "restd-v0.0.40": _DP_BY_SBATCH,
    "restd-v0.0.38": {
        "signal": Signal("USR1", 120, batch_only=False),
        "hint": "",
        "distribution": "",
        "contiguous": False,
        "wckey": "",
        "tmp_mb": None,
        "tasks_per_socket": None,
        "overcommit": False,
        "no_kill": False,
        "use_min_nodes": False,
        "wait_all_nodes": None,
        "mem_bind": "",
        "acctg_freq": "",
        "licenses": "",
        "batch_features": "",
    },
    "pyslurm": {"hint": ""},
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_renderer_table_covers_every_field(backend: str) -> None:
    assert set(BACKENDS[backend][1]) == FIELDS


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(FIELDS))
def test_each_field_changes_what_the_backend_sends(backend: str, name: str) -> None:
    """Unsetting any one field changes the backend's output: no field is silently dropped."""
    if name in REFUSED.get(backend, {}) and name != "signal":
        return  # sent by sbatch instead: test_a_field_a_backend_cannot_carry_goes_to_sbatch
    render = BACKENDS[backend][0]
    full = dataclasses.replace(FULL, **REFUSED.get(backend, {}))
    field = next(f for f in dataclasses.fields(JobRequest) if f.name == name)
    default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
    if name in ("script", "name"):
        default = "x"
    if name == "user":
        default = "daemon"  # an account every Linux has
    if name in ("requeue", "open_append"):
        default = False
    if name == "time_unlimited":
        default = True
    if name == "export":
        default = Export(ExportMode.NONE, {})
        if backend in ("restd-v0.0.41", "restd-v0.0.40"):  # changed to what sbatch submits instead: below
            return
    changed = dataclasses.replace(full, **{name: default})
    assert render(changed) != render(full), f"{backend} does not render {name}"


@pytest.mark.parametrize("export", [Export(ExportMode.NONE), Export(ExportMode.LIST, {"FOO": "1"})])
def test_an_export_without_all_starts_from_the_login_environment(export: Export) -> None:
    """sbatch --export=NONE or FOO implies --get-user-env: v0.0.38 asks for it; the data_parser
    versions have no such key, so the request goes to sbatch (RestdBackend's fallback)."""
    req = dataclasses.replace(FULL, **REFUSED["restd-v0.0.38"], export=export)
    req = dataclasses.replace(req, signal=None)
    assert restd_submit.job_description(req, {"PATH": "/bin"})["job"]["get_user_environment"] == ""
    assert (
        "get_user_environment"
        not in restd_submit.job_description(dataclasses.replace(req, export=Export()), {"PATH": "/bin"})["job"]
    )
    with pytest.raises(restd_submit.Unexpressible, match=r"--export=.*login environment"):
        restd_versions.api_for("v0.0.41").submit_body(dataclasses.replace(req, **_DP_BY_SBATCH), {"PATH": "/bin"})


def test_data_parser_refuses_mail_type() -> None:
    with pytest.raises(restd_submit.Unexpressible, match="mail"):
        restd_versions.api_for("v0.0.41").submit_body(FULL, {"PATH": "/bin"}, now=1e9)


def test_v0_0_38_refuses_a_batch_shell_signal_and_sends_a_step_signal() -> None:
    full = dataclasses.replace(FULL, **{**REFUSED["restd-v0.0.38"], "signal": FULL.signal})
    with pytest.raises(restd_submit.Unexpressible, match="B:USR1@120"):
        restd_submit.job_description(full, {"PATH": "/bin"})
    steps = dataclasses.replace(full, signal=Signal("USR1", 120, batch_only=False))
    assert restd_submit.job_description(steps, {"PATH": "/bin"})["job"]["signal"] == "USR1@120"


def test_task_count() -> None:
    assert FULL.task_count == 4 and dataclasses.replace(FULL, array=None).task_count == 1


@pytest.mark.parametrize("backend", ["restd-v0.0.38", "restd-v0.0.41", "restd-v0.0.40", "pyslurm"])
def test_a_field_a_backend_cannot_carry_goes_to_sbatch(backend: str) -> None:
    """Each such field alone makes the backend hand the request to sbatch (Unexpressible), never drop it."""
    render = BACKENDS[backend][0]
    base = dataclasses.replace(FULL, **REFUSED[backend])
    for name in REFUSED[backend]:
        if name == "signal":
            continue
        with pytest.raises(restd_submit.Unexpressible):
            render(dataclasses.replace(base, **{name: getattr(FULL, name)}))


@pytest.mark.parametrize(
    ("sharing", "argv_opt", "v38", "dp", "pyslurm"),
    [
        (Sharing.EXCLUSIVE, "--exclusive", {"exclusive": "exclusive"}, ["none"], "no"),
        (Sharing.USER, "--exclusive=user", {"exclusive": "user"}, ["user"], "user"),
        (Sharing.MCS, "--exclusive=mcs", {"exclusive": "mcs"}, ["mcs"], "mcs"),
        (Sharing.OVERSUBSCRIBE, "--oversubscribe", {"oversubscribe": True}, ["oversubscribe"], "yes"),
    ],
)
def test_sharing_per_backend(sharing: Sharing, argv_opt: str, v38: dict[str, Any], dp: list[str], pyslurm: str) -> None:
    """v0.0.38 reads exclusive as sbatch's argument: "true" is "Invalid exclusive specification"."""
    req = JobRequest(script="#!/bin/sh\n", name="x", user="root", sharing=sharing)
    assert argv_opt in argv.sbatch_argv(req)
    job = restd_submit.job_description(req, {})["job"]
    assert {k: job.get(k) for k in v38} == v38
    assert restd_versions.api_for("v0.0.41").submit_body(req, {}, now=1e9)["job"]["shared"] == dp
    assert pyslurm_backend.submit_attributes(req)["resource_sharing"] == pyslurm


def test_gpu_amounts_as_each_backend_sends_them() -> None:
    req = JobRequest(
        script="#!/bin/sh\n",
        name="x",
        user="root",
        gpus=4,
        gpus_per_task=2,
        cpus_per_gpu=3,
        memory_mb_per_gpu=1024,
        tasks_per_gpu=1,
        time_min_seconds=90,
    )
    args = argv.sbatch_argv(req)
    for opt in (
        "--gpus-per-task=2",
        "--cpus-per-gpu=3",
        "--mem-per-gpu=1024M",
        "--ntasks-per-gpu=1",
        "--time-min=1:30",
    ):
        assert opt in args
    job = restd_submit.job_description(req, {})["job"]
    assert (job["gpus_per_task"], job["cpus_per_gpu"], job["memory_per_gpu"], job["ntasks_per_tres"]) == (
        "2",
        3,
        1024,
        1,
    )
    assert job["time_minimum"] == 2  # whole minutes, rounded up as sbatch
    dp = restd_versions.api_for("v0.0.41").submit_body(req, {}, now=1e9)["job"]
    assert (dp["tres_per_task"], dp["cpus_per_tres"], dp["memory_per_tres"]) == (
        "gres/gpu:2",
        "gres/gpu:3",
        "gres/gpu:1024",
    )


def test_v0_0_38_says_no_requeue_as_sbatch_does() -> None:
    """22.05's slurmrestd ignores "requeue": false (the job stays Requeue=1); "no_requeue" is --no-requeue."""
    req = JobRequest(script="#!/bin/sh\n", name="x", user="root", requeue=False)
    job = restd_submit.job_description(req, {})["job"]
    assert job.get("no_requeue") is True and "requeue" not in job
    assert restd_submit.job_description(dataclasses.replace(req, requeue=True), {})["job"]["requeue"] is True


@pytest.mark.parametrize(
    ("fields", "tasks"),
    [
        ({"nodes": 2, "tasks_per_node": 1, "cpus_per_task": 2, "min_cpus_per_node": 2}, 2),  # #PBS select=2:...
        ({"tasks_per_node": 3}, 3),  # one node unless -N
        ({"nodes": 2, "max_nodes": 2, "tasks_per_node": 2}, 4),
        ({"nodelist": ("n1", "n2", "n3"), "nodes": 2, "tasks_per_node": 1}, 3),  # -w raises -N
        ({"nodes": 2, "sockets_per_node": 1, "cores_per_socket": 2}, 4),
        ({"nodes": 2, "max_nodes": 4, "tasks_per_node": 2}, None),  # a node range: sbatch derives nothing
        ({"nodes": 2, "cpus_per_task": 2}, 2),  # one task per node: the CPUs are 2 x -c
        ({"nodes": 2}, 2),
        ({"nodelist": ("n1", "n2")}, 2),
        ({"cpus_per_task": 2}, None),  # without -N/-w: one task, as Slurm's default
        ({"sockets_per_node": 2}, None),  # without -N/-w
        ({"nodes": 2, "ntasks": 3, "tasks_per_node": 2}, 3),  # -n as given
    ],
)
def test_v0_0_38_sends_the_task_count_sbatch_derives(fields: dict[str, Any], tasks: int | None) -> None:
    """22.05's slurmrestd skips sbatch's _opt_verify: without the derived -n, a job with
    --ntasks-per-node, -B or -N holds one task's CPUs instead of every task's."""
    req = JobRequest(script="#!/bin/sh\n", name="x", user="root", **fields)
    assert restd_submit.job_description(req, {})["job"].get("tasks") == tasks
