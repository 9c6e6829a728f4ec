"""Side by side on the real stack: the same script through sbatch (as alice) and through clusterd.

What the job saw (user, working and submit directories, name, exported variables, task count) and
where its output landed must match; job ids differ and are normalised away.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.users import user_dir
from tests.support.wait import wait_for

PROBE = (
    "#!/bin/bash\n#SBATCH -t 2\n#SBATCH -n 2\n#SBATCH -o %x-%j.log\n"
    'echo "uid=$(id -u) pwd=$(pwd) submit=$SLURM_SUBMIT_DIR name=$SLURM_JOB_NAME ntasks=$SLURM_NTASKS '
    'var=$PARITY_VAR task=${SLURM_ARRAY_TASK_ID:-none}"\n'
)
DEFAULT_OUT = "#!/bin/bash\n#SBATCH -t 2\n#SBATCH --array=0-1\necho task=$SLURM_ARRAY_TASK_ID\n"


@pytest.fixture
def alice_dirs() -> Iterator[tuple[Path, Path]]:
    with user_dir("alice", "parity") as root:
        entry = pwd.getpwnam("alice")
        dirs = (root / "sbatch", root / "clusterd")
        for d in dirs:
            d.mkdir(mode=0o755)
            os.chown(d, entry.pw_uid, entry.pw_gid)
        yield dirs


def sbatch_as_alice(stack: Stack, cwd: Path, script_path: Path, env: dict[str, str]) -> str:
    entry = pwd.getpwnam("alice")
    base = {
        "PATH": "/usr/bin:/bin",
        "HOME": entry.pw_dir,
        "USER": "alice",
        "LOGNAME": "alice",
        "SLURM_CONF": stack.env.get("SLURM_CONF", "/etc/slurm/slurm.conf"),
    }
    out = subprocess.run(
        [
            "setpriv",
            f"--reuid={entry.pw_uid}",
            f"--regid={entry.pw_gid}",
            "--clear-groups",
            "--",
            "sbatch",
            "--parsable",
            str(script_path),
        ],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip().split(";")[0]


def finished(stack: Stack, job_id: str) -> bool:
    out = stack.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()
    return out == ""


def test_same_script_sees_the_same_world(daemon: Daemon, stack: Stack, alice_dirs: tuple[Path, Path]) -> None:
    direct, through = alice_dirs
    env = {"PARITY_VAR": "exported $(id)"}
    script_path = direct / "probe.sh"
    script_path.write_text(PROBE)
    direct_id = sbatch_as_alice(stack, direct, script_path, env)
    job = (
        daemon.client("alice")
        .submit(jobs_pb2.JobSpec(script=PROBE, submit_directory=str(through), script_name="probe.sh", environment=env))
        .job
    )
    wait_for(lambda: finished(stack, direct_id), timeout=120, what="the sbatch job")
    done = wait_for(
        lambda: (j := daemon.client("alice").get(job.job_id)).terminal and j, timeout=120, what="the clusterd job"
    )
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED and done.exit_code == 0
    seen_direct = (direct / f"probe.sh-{direct_id}.log").read_text().replace(str(direct), "DIR")
    seen_through = (through / f"probe.sh-{job.job_id}.log").read_text().replace(str(through), "DIR")
    assert seen_through == seen_direct
    assert f"uid={pwd.getpwnam('alice').pw_uid} pwd=DIR submit=DIR name=probe.sh ntasks=2" in seen_direct
    assert done.stdout_path == str(through / f"probe.sh-{job.job_id}.log")


def test_default_output_names_match_for_arrays(daemon: Daemon, stack: Stack, alice_dirs: tuple[Path, Path]) -> None:
    direct, through = alice_dirs
    script_path = direct / "arr.sh"
    script_path.write_text(DEFAULT_OUT)
    direct_id = sbatch_as_alice(stack, direct, script_path, {})
    job = (
        daemon.client("alice")
        .submit(jobs_pb2.JobSpec(script=DEFAULT_OUT, submit_directory=str(through), script_name="arr.sh"))
        .job
    )
    for d, job_id in ((direct, direct_id), (through, job.job_id)):
        wait_for(
            lambda d=d, job_id=job_id: (
                all((d / f"slurm-{job_id}_{t}.out").exists() for t in (0, 1)) and finished(stack, job_id)
            ),
            timeout=120,
            what=f"array {job_id}'s outputs",
        )
        assert sorted(p.name for p in d.glob("slurm-*")) == [f"slurm-{job_id}_0.out", f"slurm-{job_id}_1.out"]
    assert job.stdout_path == str(through / "slurm-%A_%a.out").replace("%A", job.job_id)


ENV_PROBE = (
    '#!/bin/bash\n#SBATCH -t 2\n#SBATCH -o env.out\necho "PATH=$PATH HOME=$HOME FOO=${FOO-unset} BAR=${BAR-unset}"\n'
)


@pytest.mark.parametrize("export", ["ALL", "NONE", "FOO", "FOO,BAR=x"])
def test_export_modes_match_sbatch(daemon: Daemon, stack: Stack, alice_dirs: tuple[Path, Path], export: str) -> None:
    """--export as sbatch has it; the caller's environment (FOO, BAR, PATH) is what the CLI sends."""
    direct, through = alice_dirs
    script_path = direct / "env.sh"
    script_path.write_text(ENV_PROBE.replace("#SBATCH -o", f"#SBATCH --export={export}\n#SBATCH -o"))
    caller_env = {"FOO": "1", "BAR": "2", "PATH": "/usr/bin:/bin", "HOME": pwd.getpwnam("alice").pw_dir}
    direct_id = sbatch_as_alice(stack, direct, script_path, {"FOO": "1", "BAR": "2"})
    spec = jobs_pb2.JobSpec(script=ENV_PROBE, submit_directory=str(through), environment=caller_env, export=export)
    job = daemon.client("alice").submit(spec).job
    for d, job_id in ((direct, direct_id), (through, job.job_id)):
        wait_for(
            lambda d=d, job_id=job_id: (d / "env.out").exists() and finished(stack, job_id),
            timeout=120,
            what=f"job {job_id}'s output",
        )
    assert (through / "env.out").read_text() == (direct / "env.out").read_text()


def test_a_job_without_checkpoints_runs_to_its_limit(daemon: Daemon, alice_dirs: tuple[Path, Path]) -> None:
    """No early SIGUSR1 for a job that did not ask: bash without a handler would die at 'signal 10'."""
    _, through = alice_dirs
    script = "#!/bin/bash\n#SBATCH -t 1\n#SBATCH -o limit.out\necho start\nsleep 300\n"
    client = daemon.client("alice")
    job = client.submit(jobs_pb2.JobSpec(script=script, submit_directory=str(through))).job
    try:
        wait_for(
            lambda: (j := client.get(job.job_id)).terminal or bool(j.restarts),
            timeout=240,
            interval=2,
            what="the job to reach its limit",
        )
        ended = client.get(job.job_id)
        if ended.restarts:
            assert ended.restarts[0].cause == jobs_pb2.TERMINATION_CAUSE_TIME_LIMIT, ended
        else:
            assert ended.state == jobs_pb2.JOB_STATE_TIMEOUT, ended
        assert "start" in (through / "limit.out").read_text()
    finally:
        client.cancel(job.job_id)


def test_an_exported_function_reaches_the_job_as_under_sbatch(
    daemon: Daemon, stack: Stack, alice_dirs: tuple[Path, Path]
) -> None:
    """`export -f f` in the submitting shell: under --export=ALL the job's bash has f, and so do its children."""
    direct, through = alice_dirs
    script = "#!/bin/bash\n#SBATCH -t 2\n#SBATCH -o fn.out\nf batch\nbash -c 'f child'\n"
    env = {"BASH_FUNC_f%%": '() {  echo "hi $1 from $(id -un)"\n}'}
    for d in (direct, through):
        (d / "fn.sh").write_text(script)
    direct_id = sbatch_as_alice(stack, direct, direct / "fn.sh", env)
    cli = subprocess.run(
        [sys.executable, "-m", "clusterctl.cli.main", "submit", "--parsable", "fn.sh"],
        cwd=through,
        env={**daemon.cli_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    for d, job_id in ((direct, direct_id), (through, cli.stdout.strip())):
        wait_for(
            lambda d=d, job_id=job_id: (d / "fn.out").exists() and finished(stack, job_id),
            timeout=120,
            what=f"job {job_id}'s output",
        )
    seen = (direct / "fn.out").read_text()
    assert seen == "hi batch from alice\nhi child from alice\n"
    assert (through / "fn.out").read_text() == seen
