"""``submit`` reads sbatch's flags as sbatch does: each flag -> its JobSpec field, no abbreviations."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from .conftest import Runner
from .fakes import FakeClient, sent_spec


@pytest.fixture(autouse=True)
def caller(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in list(os.environ):
        if name not in ("COLUMNS", "TZ"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/bash\nhostname\n")
    return tmp_path


def sent(fake: FakeClient) -> dict[str, Any]:
    spec = json_format.MessageToDict(sent_spec(fake), preserving_proto_field_name=True)
    for always in ("request_id", "submit_directory", "script", "script_name"):
        spec.pop(always, None)
    return spec


# sbatch flag(s) as typed -> the JobSpec fields they set (JSON form: uint64 are strings).
FLAGS: list[tuple[list[str], dict[str, Any]]] = [
    (["-N", "4"], {"nodes": 4}),
    (["--nodes=2-6"], {"nodes": 2, "max_nodes": 6}),
    (["-N2-3"], {"nodes": 2, "max_nodes": 3}),
    (["-n", "4"], {"ntasks": 4}),
    (["-n4"], {"ntasks": 4}),
    (["--ntasks", "4"], {"ntasks": 4}),
    (["--ntasks=8"], {"ntasks": 8}),
    (["--ntasks-per-node", "2"], {"tasks_per_node": 2}),
    (["-c", "3"], {"cpus_per_task": 3}),
    (["--cpus-per-task=5"], {"cpus_per_task": 5}),
    (["-G", "2"], {"gpus": 2}),
    (["--gpus", "a100:8"], {"gpus": 8, "gpu_type": "a100"}),
    (["--gpus-per-node", "4"], {"gpus_per_node": 4}),
    (["--gpus-per-node=h100:2"], {"gpus_per_node": 2, "gpu_type": "h100"}),
    (["--gres=gpu:2"], {"gpus_per_node": 2}),
    (["--gres", "gpu:a100:1"], {"gpus_per_node": 1, "gpu_type": "a100"}),
    (["--gres=gpu:tesla"], {"gpus_per_node": 1, "gpu_type": "tesla"}),
    (["--gres=gpu:2", "--gpus-per-node=a100:2"], {"gpus_per_node": 2, "gpu_type": "a100"}),
    (["--mem", "4G"], {"memory_mb_per_node": "4096"}),
    (["--mem-per-cpu=512M"], {"memory_mb_per_cpu": "512"}),
    (["--mem=0"], {"sbatch_options": ["--mem=0"]}),
    (["-i", "in.txt"], {"sbatch_options": ["--input=in.txt"]}),  # all of each node's memory: 0 is "unset" in the field
    (["-t", "1:00:00"], {"time_limit": "1:00:00"}),
    (["--time=1-12"], {"time_limit": "1-12"}),
    (["-p", "debug"], {"partition": "debug"}),
    (["-A", "ml"], {"account": "ml"}),
    (["-q", "high"], {"qos": "high"}),
    (["-J", "llm"], {"name": "llm"}),
    (["--job-name=llm"], {"name": "llm"}),
    (["-o", "rel-%j.out"], {"stdout_path": "rel-%j.out"}),
    (["-e", "logs/%x-%A_%a.err"], {"stderr_path": "logs/%x-%A_%a.err"}),
    (["-D", "sub/dir"], {"working_directory": "sub/dir"}),
    (["-a", "0-9%2"], {"array": "0-9%2"}),
    (["--array=1,3,5-15:2"], {"array": "1,3,5-15:2"}),
    (["-d", "afterok:12:13"], {"dependency": "afterok:12:13"}),
    (["--dependency=singleton"], {"dependency": "singleton"}),
    (["--exclusive"], {"sbatch_options": ["--exclusive"]}),
    (["--exclusive=user", "-s"], {"sbatch_options": ["--exclusive=user", "--oversubscribe"]}),
    (["--exclusive=mcs"], {"sbatch_options": ["--exclusive=mcs"]}),
    (
        ["--gpus-per-task", "a100:1", "--cpus-per-gpu=4", "--mem-per-gpu=10G", "--ntasks-per-gpu=1"],
        {"sbatch_options": ["--gpus-per-task=a100:1", "--cpus-per-gpu=4", "--mem-per-gpu=10G", "--ntasks-per-gpu=1"]},
    ),
    (
        ["--gpu-bind=closest", "--gres-flags", "enforce-binding", "--hint=nomultithread", "-m", "cyclic"],
        {
            "sbatch_options": [
                "--gpu-bind=closest",
                "--gres-flags=enforce-binding",
                "--hint=nomultithread",
                "--distribution=cyclic",
            ]
        },
    ),
    (
        ["-B", "1:2:1", "--threads-per-core=1", "--ntasks-per-core=1", "--mincpus=2", "--contiguous", "--spread-job"],
        {
            "sbatch_options": [
                "--extra-node-info=1:2:1",
                "--threads-per-core=1",
                "--ntasks-per-core=1",
                "--mincpus=2",
                "--contiguous",
                "--spread-job",
            ]
        },
    ),
    (
        ["--kill-on-invalid-dep=yes", "--deadline", "now+2hours", "--time-min=30", "--wckey=proj", "--no-requeue"],
        {
            "sbatch_options": [
                "--kill-on-invalid-dep=yes",
                "--deadline=now+2hours",
                "--time-min=30",
                "--wckey=proj",
                "--no-requeue",
            ]
        },
    ),
    (
        ["--open-mode=truncate", "--signal=B:USR1@60"],
        {"sbatch_options": ["--open-mode=truncate", "--signal=B:USR1@60"]},
    ),
    (
        ["--tmp=1G", "--ntasks-per-socket=1", "--gpus-per-socket=1", "--delay-boot=10", "-O", "-k", "--use-min-nodes"],
        {
            "sbatch_options": [
                "--tmp=1G",
                "--ntasks-per-socket=1",
                "--gpus-per-socket=1",
                "--delay-boot=10",
                "--overcommit",
                "--no-kill",
                "--use-min-nodes",
            ]
        },
    ),
    (
        [
            "--wait-all-nodes=1",
            "--mem-bind=local",
            "--acctg-freq=task=30",
            "-L",
            "fluent:2",
            "--batch=a100",
            "--no-kill=off",
        ],
        {
            "sbatch_options": [
                "--wait-all-nodes=1",
                "--mem-bind=local",
                "--acctg-freq=task=30",
                "--licenses=fluent:2",
                "--batch=a100",
                "--no-kill=off",
            ]
        },
    ),
    (["--begin", "now+1hour"], {"begin": "now+1hour"}),
    (["-H"], {"hold": True}),
    (["--hold"], {"hold": True}),
    (["--mail-type=END,FAIL"], {"mail_type": "END,FAIL"}),
    (["--mail-user", "alice@example.org"], {"mail_user": "alice@example.org"}),
    (["-C", "a100|h100"], {"constraint": "a100|h100"}),
    (["--constraint=ib", "-C", "nvme"], {"constraint": "ib&nvme"}),
    (["--reservation", "maint"], {"reservation": "maint"}),
    (["--nice", "10"], {"nice": 10}),
    (["--nice=0"], {}),
    (["-w", "node[1-2]"], {"placement": {"nodelist": ["node1", "node2"]}}),
    (["--nodelist=node3"], {"placement": {"nodelist": ["node3"]}}),
    (["-x", "node4"], {"placement": {"exclude_nodes": ["node4"]}}),
    (["--exclude", "node[5,7]"], {"placement": {"exclude_nodes": ["node5", "node7"]}}),
    (["--export=NONE"], {"export": "NONE"}),
    (["--export", "ALL"], {"export": "ALL"}),
]


@pytest.mark.parametrize(("flags", "fields"), FLAGS, ids=[" ".join(f) for f, _ in FLAGS])
def test_sbatch_flag_sets_its_field(cli: Runner, fake: FakeClient, flags: list[str], fields: dict[str, Any]) -> None:
    r = cli("submit", *flags, "job.sh")
    assert r.code == 0, r.err
    assert sent(fake) == fields


@pytest.mark.parametrize(
    ("flag", "meant"),
    [
        ("--ntask", "--ntasks"),
        ("--gpu", "--gpus"),
        ("--expo", "--export"),
        ("--time-lim", "--time"),
        ("--mem-per", "--mem-per-cpu"),
        ("--part", "--partition"),
        ("--wai", "--wait"),
        ("--exclu", "--exclude"),
    ],
)
def test_abbreviations_are_refused(cli: Runner, fake: FakeClient, flag: str, meant: str) -> None:
    r = cli("submit", flag, "4", "job.sh")
    assert r.code == 2
    assert f"unrecognized arguments: {flag}" in r.err
    assert not fake.calls


def test_abbreviations_are_refused_before_the_command_too(cli: Runner) -> None:
    r = cli("--tok=x", "list")
    assert r.code == 2 and "unrecognized arguments: --tok=x" in r.err


def test_ntasks_is_never_ntasks_per_node(cli: Runner, fake: FakeClient) -> None:
    """The bug behind this module: `--ntasks 4` once became `--ntasks-per-node 4` (8 tasks on 2 nodes)."""
    assert cli("submit", "-N", "2", "--ntasks", "4", "job.sh").code == 0
    assert sent(fake) == {"nodes": 2, "ntasks": 4}


def test_export_value_is_never_export_env(cli: Runner, fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X", "1")
    assert cli("submit", "--export=X", "job.sh").code == 0
    assert sent(fake) == {"export": "X", "environment": {"X": "1"}}


@pytest.mark.parametrize("flag", ["--bogus", "--segment=2", "-Z"])
def test_unknown_flag_is_named(cli: Runner, fake: FakeClient, flag: str) -> None:
    r = cli("submit", flag, "job.sh")
    assert r.code == 2
    assert flag in r.err and r.err.startswith("clusterctl: error: ")
    assert not fake.calls


def test_options_after_the_script_belong_to_the_script(cli: Runner, fake: FakeClient) -> None:
    """As with sbatch: `submit job.sh -N 4` passes "-N 4" to the script, so it is never read as nodes.

    The API has no field for script arguments, so they are refused rather than dropped.
    """
    r = cli("submit", "-n", "2", "job.sh", "-N", "4", "--lr=0.1")
    assert r.code == 2
    assert "script arguments '-N 4 --lr=0.1'" in r.err
    assert "options go before SCRIPT" in r.err
    assert not fake.calls


def test_wrap_is_a_generated_sh_script(cli: Runner, fake: FakeClient) -> None:
    assert cli("submit", "-n", "2", "--wrap", "srun hostname | sort").code == 0
    spec = sent_spec(fake)
    assert spec.script == "#!/bin/sh\n# This script was created by sbatch --wrap.\n\nsrun hostname | sort\n"
    assert spec.script_name == "wrap"  # sbatch names --wrap jobs "wrap"
    assert not spec.command and spec.ntasks == 2


def test_script_name_and_submit_directory(cli: Runner, fake: FakeClient, caller: Path) -> None:
    (caller / "sub").mkdir()
    (caller / "sub" / "train.sbatch").write_text("#!/bin/bash\n")
    assert cli("submit", "sub/train.sbatch").code == 0
    spec = sent_spec(fake)
    assert (spec.script_name, spec.submit_directory) == ("train.sbatch", str(caller))


def test_parsable_prints_only_the_job_id(cli: Runner) -> None:
    r = cli("submit", "--parsable", "job.sh")
    assert (r.code, r.out) == (0, "100\n")


@pytest.mark.parametrize(
    ("environ", "flags", "fields"),
    [
        (
            {"SBATCH_PARTITION": "batch", "SBATCH_TIMELIMIT": "10", "SBATCH_JOB_NAME": "env"},
            [],
            {"sbatch_options": ["--job-name=env", "--partition=batch", "--time=10"]},
        ),
        # the command line wins: its typed fields over everything, its other options after the environment's
        (
            {"SBATCH_PARTITION": "batch", "SBATCH_EXCLUSIVE": "user"},
            ["-p", "debug", "-s"],
            {"partition": "debug", "sbatch_options": ["--exclusive=user", "--partition=batch", "--oversubscribe"]},
        ),
        (
            {"SBATCH_NO_REQUEUE": "1", "SBATCH_REQ_SWITCH": "1", "SBATCH_WAIT4SWITCH": "5"},
            [],
            {"sbatch_options": ["--no-requeue", "--switches=1@5"]},
        ),
        ({"SBATCH_EXPORT": "NONE"}, [], {"export": "NONE"}),
        ({"SBATCH_IGNORE_PBS": ""}, [], {"sbatch_options": ["--ignore-pbs"]}),
        ({}, ["--ignore-pbs"], {"sbatch_options": ["--ignore-pbs"]}),
    ],
)
def test_sbatch_input_variables_are_options(
    cli: Runner,
    fake: FakeClient,
    monkeypatch: pytest.MonkeyPatch,
    environ: dict[str, str],
    flags: list[str],
    fields: dict[str, Any],
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    r = cli("submit", *flags, "job.sh")
    assert r.code == 0, r.err
    assert sent(fake) == fields


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("SBATCH_GET_USER_ENV", "1", "SBATCH_GET_USER_ENV stands for --get-user-env, which is not allowed"),
        ("SBATCH_WAIT", "1", "SBATCH_WAIT stands for --wait"),
        ("SBATCH_TIMELIMIT", "2h", "SBATCH_TIMELIMIT: bad time limit '2h'"),
        ("SBATCH_MEM_PER_GPU", "1.5G", "SBATCH_MEM_PER_GPU: bad memory size '1.5G'"),
    ],
)
def test_a_refused_input_variable_is_named(
    cli: Runner, monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(name, value)
    r = cli("submit", "job.sh")
    assert r.code == 2 and says in r.err, r.err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--mem=1.5G"], "bad memory size '1.5G'"),
        (["--mem-per-gpu=1.5G"], "argument --mem-per-gpu: bad memory size '1.5G'"),
        (["--hint=fast"], "argument --hint: bad value 'fast'"),
        (["-B", "x"], "argument -B: bad -B 'x'"),
        (["--time-min=0"], "argument --time-min"),
    ],
)
def test_values_are_checked_with_the_services_parser(cli: Runner, flags: list[str], says: str) -> None:
    r = cli("submit", *flags, "job.sh")
    assert r.code == 2 and says in r.err, r.err


def test_help_lists_the_sbatch_flags(cli: Runner) -> None:
    out = cli("submit", "--help").out
    for flag in (
        "--ntasks",
        "--array",
        "--dependency",
        "--exclusive",
        "--mem-per-cpu",
        "--begin",
        "--hold",
        "--mail-type",
        "--constraint",
        "--reservation",
        "--export",
        "--nice",
        "--wrap",
        "--gpus",
        "--gpus-per-task",
        "--no-requeue",
        "--oversubscribe",
    ):
        assert flag in out
