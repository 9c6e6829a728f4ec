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
    base = {"PATH": "/usr/bin:/bin", "HOME": entry.pw_dir, "USER": "alice", "LOGNAME": "alice",
            "SLURM_CONF": stack.env.get("SLURM_CONF", "/etc/slurm/slurm.conf")}  # fmt: skip
    out = subprocess.run(
        ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups", "--",
         "sbatch", "--parsable", str(script_path)],
        cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
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
    job = daemon.client("alice").submit(jobs_pb2.JobSpec(script=PROBE, submit_directory=str(through),
                                                         script_name="probe.sh", environment=env)).job  # fmt: skip
    wait_for(lambda: finished(stack, direct_id), timeout=120, what="the sbatch job")
    done = wait_for(lambda: (j := daemon.client("alice").get(job.job_id)).terminal and j, timeout=120,
                    what="the clusterd job")  # fmt: skip
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
    job = daemon.client("alice").submit(jobs_pb2.JobSpec(script=DEFAULT_OUT, submit_directory=str(through),
                                                         script_name="arr.sh")).job  # fmt: skip
    for d, job_id in ((direct, direct_id), (through, job.job_id)):
        wait_for(lambda d=d, job_id=job_id: all((d / f"slurm-{job_id}_{t}.out").exists() for t in (0, 1))
                 and finished(stack, job_id), timeout=120, what=f"array {job_id}'s outputs")  # fmt: skip
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
        wait_for(lambda d=d, job_id=job_id: (d / "env.out").exists() and finished(stack, job_id), timeout=120,
                 what=f"job {job_id}'s output")  # fmt: skip
    assert (through / "env.out").read_text() == (direct / "env.out").read_text()


def test_a_job_without_checkpoints_runs_to_its_limit(daemon: Daemon, alice_dirs: tuple[Path, Path]) -> None:
    """No early SIGUSR1 for a job that did not ask: bash without a handler would die at 'signal 10'."""
    _, through = alice_dirs
    script = "#!/bin/bash\n#SBATCH -t 1\n#SBATCH -o limit.out\necho start\nsleep 300\n"
    client = daemon.client("alice")
    job = client.submit(jobs_pb2.JobSpec(script=script, submit_directory=str(through))).job
    try:
        wait_for(lambda: (j := client.get(job.job_id)).terminal or bool(j.restarts), timeout=240, interval=2,
                 what="the job to reach its limit")  # fmt: skip
        ended = client.get(job.job_id)
        if ended.restarts:
            assert ended.restarts[0].cause == jobs_pb2.TERMINATION_CAUSE_TIME_LIMIT, ended
        else:
            assert ended.state == jobs_pb2.JOB_STATE_TIMEOUT, ended
        assert "start" in (through / "limit.out").read_text()
    finally:
        client.cancel(job.job_id)


# sbatch's option table side by side: each case is submitted held by sbatch (as alice) and by
# clusterctl submit, from the same directory with the same arguments, script and SBATCH_*
# variables; Slurm must then hold the same job. Few jobs, each with many options: nothing runs.
OPTION_CASES: dict[str, tuple[list[str], str, dict[str, str]]] = {
    "gpus-per-task": (
        ["-H", "-t", "10"],
        "#SBATCH -N 1 -n 2 --gpus-per-task=1 --cpus-per-gpu=1 --mem-per-gpu=256M --gpu-bind=closest\n"
        "#SBATCH --time-min=5 -o out-%j.log -e err-%j.log -i in.txt --kill-on-invalid-dep=yes\n",
        {},
    ),
    "gres-binding": (
        ["-H", "--exclusive=user"],
        "#SBATCH --gres=gpu:2 --gres-flags=enforce-binding --hint=nomultithread --ntasks-per-core=1 -n 2\n"
        "#SBATCH --mincpus=2 -B 1:2:1 --spread-job -t 1-0\n",
        {},
    ),
    "ntasks-per-gpu": (
        ["-H", "--gpus=4", "--ntasks-per-gpu=1", "-s"],
        "#SBATCH -N 2 -n 4 --threads-per-core=1 --mem=512\n",
        {},
    ),
    "exclusive-layout": (
        ["-H", "--no-requeue", "--open-mode=truncate"],
        "#SBATCH --exclusive --contiguous -N 2 -m cyclic --deadline=2037-01-01T00:00:00 -t 30\n"
        "#SBATCH--signal=B:USR1@30\n",
        {},
    ),
    "mcs-wckey": (
        ["-H", "--exclusive=mcs", "--wckey=proj"],
        "#SBATCH -n 1 --cores-per-socket=2 --sockets-per-node=1 --gpus=1 --mem-per-gpu=300\n",
        {},
    ),
    "array-mail-dependency": (
        ["-H", "--array=0-7%2", "--mail-type=END,FAIL", "--mail-user=alice"],
        "#SBATCH -D sub --kill-on-invalid-dep=no -d singleton --nice=10 -m plane=2 -n 4\n",
        {},
    ),
    "command-line-wins": (
        ["-H", "--exclusive", "--mem=0"],
        "#SBATCH -s --gpus-per-node=2 --gres-flags=disable-binding --ntasks-per-node=2 -N 1\n",
        {},
    ),
    "node-options": (
        ["-H", "--tmp=100", "--delay-boot=10", "-O", "--no-kill", "--use-min-nodes"],
        "#SBATCH -n 2 --ntasks-per-socket=1 --sockets-per-node=1 --gpus-per-socket=1 --wait-all-nodes=1\n"
        "#SBATCH --mem-bind=local --acctg-freq=task=30\n",
        {},
    ),
    "input-variables": (
        ["-H", "-J", "from-flag"],
        "#SBATCH -p debug -t 5 -J from-script --mem-per-cpu=300\n",
        {"SBATCH_PARTITION": "batch", "SBATCH_TIMELIMIT": "7", "SBATCH_JOB_NAME": "from-env",
         "SBATCH_GPUS_PER_NODE": "1", "SBATCH_NO_REQUEUE": "1"},
    ),
}  # fmt: skip
# clusterd's own placement (one leaf switch for a multi-node job) is not sbatch's: left out here.
CLUSTERD_ONLY = ["--placement", "any"]
# Fields that differ by construction: ids, times of submission, clusterd's tracking comment, the
# way the script reached Slurm (Command= is sbatch's path of it), and the session sbatch ran in.
_VOLATILE = {
    "JobId", "ArrayJobId", "SubmitTime", "EligibleTime", "AccrueTime", "StartTime", "EndTime", "LastSchedEval",
    "Comment", "Command", "AllocNode:Sid", "SubmitLine", "Reason",
}  # fmt: skip


def show_job(stack: Stack, job_id: str) -> dict[str, str]:
    """``scontrol show job`` as field -> value (values with spaces are not split by scontrol's -o)."""
    out = stack.run("scontrol", "-o", "show", "job", job_id).stdout.strip()
    fields: dict[str, str] = {}
    for word in out.split(" "):
        key, eq, value = word.partition("=")
        if eq:
            fields[key] = value
        elif fields and word:
            fields[next(reversed(fields))] += " " + word
    paths = ("StdOut", "StdErr", "StdIn", "WorkDir")  # %j expanded: the job id normalised away
    return {k: v.replace(job_id, "ID") if k in paths else v for k, v in fields.items() if k not in _VOLATILE}


@pytest.fixture(scope="module")
def commands_daemon(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A clusterd on the commands backend (sbatch run as the caller), beside the module's slurmrestd one."""
    d = Daemon(stack, tmp_path_factory.mktemp("clusterd-commands"), metrics_port=None,
               extra_env={"CLUSTERD_SLURM__BACKEND": "commands"})  # fmt: skip
    d.start()
    yield d
    d.stop()


@pytest.mark.parametrize("backend", ["slurmrestd", "commands"])
def test_every_option_holds_the_same_job_as_sbatch(
    backend: str, request: pytest.FixtureRequest, stack: Stack, alice_dir: Path
) -> None:
    daemon: Daemon = request.getfixturevalue("daemon" if backend == "slurmrestd" else "commands_daemon")
    entry = pwd.getpwnam("alice")
    (alice_dir / "sub").mkdir()
    os.chown(alice_dir / "sub", entry.pw_uid, entry.pw_gid)
    ids: list[str] = []
    try:
        for case, (argv, header, env) in OPTION_CASES.items():
            script = alice_dir / f"{case}.sh"
            script.write_text(f"#!/bin/bash\n{header}echo {case}\n")
            direct = subprocess.run(
                ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups", "--",
                 "sbatch", "--parsable", *argv, script.name],
                cwd=alice_dir, capture_output=True, text=True, timeout=60,
                env={"PATH": "/usr/bin:/bin", "HOME": entry.pw_dir, "USER": "alice", "LOGNAME": "alice",
                     "SLURM_CONF": stack.env.get("SLURM_CONF", "/etc/slurm/slurm.conf"), **env},
            )  # fmt: skip
            assert direct.returncode == 0, f"{case}: sbatch refused it: {direct.stderr}"
            ids.append(direct.stdout.strip().split(";")[0])
            through = subprocess.run(
                [sys.executable, "-m", "clusterctl.cli.main", "submit", "--parsable", *CLUSTERD_ONLY, *argv,
                 script.name],
                cwd=alice_dir, capture_output=True, text=True, timeout=60, env={**daemon.cli_env(), **env},
            )  # fmt: skip
            assert through.returncode == 0, f"{case}: clusterctl refused it: {through.stderr}"
            ids.append(through.stdout.strip())
            expected, got = show_job(stack, ids[-2]), show_job(stack, ids[-1])
            assert got == expected, f"{case}: " + ", ".join(
                f"{k}: sbatch {expected.get(k)!r} clusterctl {got.get(k)!r}"
                for k in sorted(set(expected) | set(got)) if expected.get(k) != got.get(k)
            )  # fmt: skip
    finally:
        if ids:
            stack.run("scancel", *ids, check=False)


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
    cli = subprocess.run([sys.executable, "-m", "clusterctl.cli.main", "submit", "--parsable", "fn.sh"], cwd=through,
                         env={**daemon.cli_env(), **env}, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    for d, job_id in ((direct, direct_id), (through, cli.stdout.strip())):
        wait_for(lambda d=d, job_id=job_id: (d / "fn.out").exists() and finished(stack, job_id), timeout=120,
                 what=f"job {job_id}'s output")  # fmt: skip
    seen = (direct / "fn.out").read_text()
    assert seen == "hi batch from alice\nhi child from alice\n"
    assert (through / "fn.out").read_text() == seen
