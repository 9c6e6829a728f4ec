"""sbatch and clusterctl side by side on a real stack: the same options must make Slurm hold the same job.

Each case of :data:`OPTION_CASES` is submitted held by the stack's own sbatch (as alice) and by
``clusterctl submit``, from the same directory with the same arguments, script and ``SBATCH_*``
variables; ``scontrol show job`` must then show the same job, field by field, but for the fields
that differ by construction (:data:`VOLATILE`). A case of :data:`FROM_RELEASE` run on an older
release must be refused by both instead. Used on every release and backend (tests/compat).
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import sys
from pathlib import Path

from .daemon import Daemon
from .stack import Stack

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
        "#SBATCH --exclusive=user --gpus-per-node=2 --gres-flags=disable-binding --ntasks-per-node=2 -N 1\n",
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
        {
            "SBATCH_PARTITION": "batch",
            "SBATCH_TIMELIMIT": "7",
            "SBATCH_JOB_NAME": "from-env",
            "SBATCH_GPUS_PER_NODE": "1",
            "SBATCH_NO_REQUEUE": "1",
        },
    ),
    "quoted-hash": (
        ["-H"],
        '#SBATCH -J "run#1" -t 5 # a comment\n#SBATCH --wckey=w#x -n 1\n',
        {},
    ),
    "split-directive": (
        ["-H"],
        '#SBATCH -t 5 --job-name\n#SBATCH split-name\n#SBATCH -n\n#SBATCH 2 "" -p batch\n',
        {},
    ),
    "pbs-torque": (
        ["-H"],
        "#SBATCH -t 5 -J from-sbatch\n#PBS -N torque -q batch -l nodes=2:ppn=2,walltime=00:30:00,mem=200mb\n"
        "#PBS -m abe -M alice -o pbs-%j.out -j oe -V -W depend=singleton\ntrue\n#PBS -p 5\n",
        {},
    ),
    "pbs-pro": (
        ["-H"],
        "#PBS -l select=2:ncpus=2:mpiprocs=1\n#PBS -J 0-3 -l walltime=10:00\n#SBATCH -t 5\n",
        {},
    ),
    "bsub": (
        ["-H"],
        "#PBS -N not-read\n#BSUB -J lsf -n 1,2 -W 10 -M 100000\n#BSUB -cwd sub -x -m 'node1 node2'\n",
        {},
    ),
    "ignore-pbs": (
        ["-H"],
        "#SBATCH -t 5 --ignore-pbs\n#PBS -N ignored -W umask=077 -Y\n",
        {},
    ),
    "ignore-pbs-variable": (
        ["-H", "-t", "5"],
        "#PBS -N ignored -W umask=077 -Y\n",
        {"SBATCH_IGNORE_PBS": "1"},
    ),
    "pbs-workdir": (
        ["-H", "-t", "5"],
        "#PBS -N wd -d sub\n",
        {},
    ),
}
# Cases whose sbatch takes them from a release on: before it, sbatch and clusterctl both refuse them.
FROM_RELEASE: dict[str, tuple[int, int]] = {"pbs-workdir": (23, 2)}
# clusterd's own placement (one leaf switch for a multi-node job) is not sbatch's: left out here.
CLUSTERD_ONLY = ["--placement", "any"]
# Fields that differ by construction: ids, times of submission, clusterd's tracking comment, the
# way the script reached Slurm (Command= is sbatch's path of it), and the session sbatch ran in.
VOLATILE = {
    "JobId",
    "ArrayJobId",
    "SubmitTime",
    "EligibleTime",
    "AccrueTime",
    "StartTime",
    "EndTime",
    "LastSchedEval",
    "Comment",
    "Command",
    "AllocNode:Sid",
    "SubmitLine",
    "Reason",
}


# A singleton dependency shows unfulfilled while another job of the name is queued, and "(null)" once
# slurmctld found none: the two ways' jobs share a name, so which one the second shows depends on
# whether slurmctld cleared the first's before the second arrived.
_SINGLETON_STATES = {"(null)", "singleton(unfulfilled)"}


def _settle_singleton(expected: dict[str, str], got: dict[str, str]) -> None:
    """Drop the Dependency field when the two jobs differ only by that race (both asked singleton)."""
    pair = {expected.get("Dependency"), got.get("Dependency")}
    if len(pair) == 2 and pair <= _SINGLETON_STATES:
        expected.pop("Dependency")
        got.pop("Dependency")


_FIELD_RE = re.compile(r"[A-Z][A-Za-z0-9:_/]*\Z")


def show_job(stack: Stack, job_id: str) -> dict[str, str]:
    """``scontrol show job`` as field -> value (values with spaces are not split by scontrol's -o;
    a word is a new field only when it starts with a field name: ``SubmitLine=sbatch --chdir=/x``)."""
    out = stack.run("scontrol", "-o", "show", "job", job_id).stdout.strip()
    fields: dict[str, str] = {}
    for word in out.split(" "):
        key, eq, value = word.partition("=")
        if eq and _FIELD_RE.match(key):
            fields[key] = value
        elif fields and word:
            fields[next(reversed(fields))] += " " + word
    paths = ("StdOut", "StdErr", "StdIn", "WorkDir")  # %j expanded: the job id normalised away
    own_id = re.compile(rf"(?<![0-9A-Za-z]){re.escape(job_id)}(?![0-9A-Za-z])")
    return {k: own_id.sub("ID", v) if k in paths else v for k, v in fields.items() if k not in VOLATILE}


def check_every_option(daemon: Daemon, stack: Stack, alice_dir: Path, *, unlike: frozenset[str] = frozenset()) -> None:
    """Every case of :data:`OPTION_CASES`, sbatch beside clusterctl; the jobs are cancelled after.

    ``unlike``: fields the backend cannot make as sbatch does (named by the caller, with why).
    """
    entry = pwd.getpwnam("alice")
    (alice_dir / "sub").mkdir()
    os.chown(alice_dir / "sub", entry.pw_uid, entry.pw_gid)
    major, minor = (int(part) for part in stack.slurm_version.split(".")[:2])
    ids: list[str] = []
    try:
        for case, (argv, header, env) in OPTION_CASES.items():
            script = alice_dir / f"{case}.sh"
            script.write_text(f"#!/bin/bash\n{header}echo {case}\n")
            direct = _sbatch(stack, entry, alice_dir, [*argv, script.name], env)
            through = _clusterctl(daemon, alice_dir, [*argv, script.name], env)
            if (major, minor) < FROM_RELEASE.get(case, (0, 0)):
                assert direct.returncode != 0, f"{case}: sbatch {stack.slurm_version} took it"
                assert through.returncode == 2 and "script line" in through.stderr, f"{case}: {through.stderr}"
                for done in (direct, through):
                    if done.returncode == 0:
                        ids.append(done.stdout.strip().split(";")[0])
                continue
            assert direct.returncode == 0, f"{case}: sbatch refused it: {direct.stderr}"
            ids.append(direct.stdout.strip().split(";")[0])
            assert through.returncode == 0, f"{case}: clusterctl refused it: {through.stderr}"
            ids.append(through.stdout.strip())
            expected, got = show_job(stack, ids[-2]), show_job(stack, ids[-1])
            for name in unlike:
                expected.pop(name, None)
                got.pop(name, None)
            _settle_singleton(expected, got)
            assert got == expected, f"{case}: " + ", ".join(
                f"{k}: sbatch {expected.get(k)!r} clusterctl {got.get(k)!r}"
                for k in sorted(set(expected) | set(got))
                if expected.get(k) != got.get(k)
            )
    finally:
        if ids:
            stack.run("scancel", *ids, check=False)


def _sbatch(
    stack: Stack, entry: pwd.struct_passwd, cwd: Path, argv: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The stack's own sbatch, run as ``entry``'s user."""
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={entry.pw_uid}",
            f"--regid={entry.pw_gid}",
            "--clear-groups",
            "--",
            "sbatch",
            "--parsable",
            *argv,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": stack.command_path(),
            "HOME": entry.pw_dir,
            "USER": entry.pw_name,
            "LOGNAME": entry.pw_name,
            "SLURM_CONF": stack.slurm_conf,
            **env,
        },
    )


def _clusterctl(daemon: Daemon, cwd: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``clusterctl submit`` with the daemon's caller's credentials."""
    return subprocess.run(
        [sys.executable, "-m", "clusterctl.cli.main", "submit", "--parsable", *CLUSTERD_ONLY, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**daemon.cli_env(), **env},
    )
