"""On the real stack: a hostile script gets nothing of root's, and a job runs with its caller's rights.

Each refused directive is named by script line and reaches no sbatch (counted on this clusterd's own
metrics, not Slurm's global counters that other users move); an accepted job runs as alice.
"""

from __future__ import annotations

import pwd
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from clusterctl.errors import ServiceError
from clusterctl.v1 import jobs_pb2
from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError
from clusterd.slurm.commands import CommandsBackend
from clusterd.slurm.request import JobRequest
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.wait import wait_for

SUBMITS = ('{backend="commands",command="sbatch",', '{backend="slurmrestd",command="POST job/submit",')


def submit_calls(d: Daemon) -> float:
    """Submissions that reached Slurm, whatever the backend (sbatch, or slurmrestd's POST)."""
    return sum(
        v
        for k, v in d.metrics().items()
        if k.startswith("clusterd_slurm_calls_total")
        and any(k.removeprefix("clusterd_slurm_calls_total").startswith(s) for s in SUBMITS)
    )


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("#SBATCH --bbf=/etc/shadow", "--bbf is not allowed"),
        ("#SBATCH -F /etc/shadow", "--nodefile is not allowed"),
        ("#SLURM --export-file=/proc/self/environ", "--export-file is not allowed"),
        ("#SBATCH --export-fi=/proc/1/environ", "--export-file is not allowed"),
        ("#SBATCH --priority=1", "--priority is not allowed"),
        ("#SBATCH --nice=-5", "not a non-negative whole number"),
        ("#SBATCH --reboot", "--reboot is not allowed"),
        ("#SBATCH --par=debug", "ambiguous"),
        ("#SBATCH --uid=0", "--uid is not allowed"),
        ("#PBS -W umask=0", "-W umask= has no sbatch option"),
        ("#PBS -l nice=-5", "not a non-negative whole number"),
        ("#SBATCH -W", "--wait is not allowed"),
    ],
)
def test_hostile_directive_is_refused_by_line_and_nothing_submitted(daemon: Daemon, line: str, needle: str) -> None:
    before = submit_calls(daemon)
    script = f"#!/bin/bash\n# hostile\n#SBATCH -t 1\n{line}\ncat /etc/shadow\n"
    with pytest.raises(ServiceError) as info:
        daemon.client("bob").submit(jobs_pb2.JobSpec(script=script, request_id=uuid.uuid4().hex))
    assert info.value.code_name == "INVALID_ARGUMENT"
    assert "script line 4" in info.value.message and needle in info.value.message, info.value.message
    assert submit_calls(daemon) == before, "a refused script reached sbatch"


def test_job_runs_as_the_caller_in_its_submit_directory(daemon: Daemon, alice_dir: Path) -> None:
    script = (
        "#!/bin/bash\n#SBATCH -t 2\n#SBATCH --output=out-%j.txt\n"
        'echo "uid=$(id -u) cwd=$(pwd) submit=$SLURM_SUBMIT_DIR name=$SLURM_JOB_NAME var=$MYVAR"\n'
    )
    spec = jobs_pb2.JobSpec(
        script=script, submit_directory=str(alice_dir), script_name="probe.sh", environment={"MYVAR": "from the caller"}
    )
    client = daemon.client("alice")
    job = client.submit(spec).job
    assert job.working_directory == str(alice_dir)
    assert job.stdout_path == f"{alice_dir}/out-{job.job_id}.txt"
    done = wait_for(lambda: (j := client.get(job.job_id)).terminal and j, timeout=90, what="the job to finish")
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED and done.has_exit_code and done.exit_code == 0
    out = Path(job.stdout_path)
    uid = pwd.getpwnam("alice").pw_uid
    assert out.read_text().strip() == (
        f"uid={uid} cwd={alice_dir} submit={alice_dir} name=probe.sh var=from the caller"
    )
    assert out.stat().st_uid == uid


def test_missing_chdir_is_refused_up_front(daemon: Daemon, alice_dir: Path) -> None:
    before = submit_calls(daemon)
    for d in ("/nonexistent", "/root"):  # missing; not enterable by alice
        with pytest.raises(ServiceError) as info:
            daemon.client("alice").submit(
                jobs_pb2.JobSpec(command=["true"], working_directory=d, submit_directory=str(alice_dir))
            )
        assert info.value.code_name == "INVALID_ARGUMENT" and "spec.working_directory" in info.value.message
    assert submit_calls(daemon) == before


def test_dos_line_breaks_are_refused_by_line_before_slurm(daemon: Daemon, alice_dir: Path) -> None:
    """A CRLF script: refused as sbatch would, by any backend (slurmrestd alone would take it)."""
    before = submit_calls(daemon)
    with pytest.raises(ServiceError) as info:
        daemon.client("alice").submit(
            jobs_pb2.JobSpec(script="#!/bin/bash\r\ntrue\r\n", submit_directory=str(alice_dir))
        )
    assert info.value.code_name == "INVALID_ARGUMENT"
    assert "script line 1: DOS line breaks" in info.value.message
    assert submit_calls(daemon) == before


async def test_privileges_fail_as_the_caller_even_past_the_allowlist(stack: Stack) -> None:
    """Defense in depth: a value validation would refuse (nice -5) still fails, sbatch running as alice."""
    backend = CommandsBackend(SlurmConfig(slurm_conf=stack.env.get("SLURM_CONF", "")))
    home = pwd.getpwnam("alice").pw_dir
    req = JobRequest(
        script="#!/bin/bash\ntrue\n",
        name="nice",
        user="alice",
        hold=True,
        stdout="/dev/null",
        working_directory=home,
        submit_directory=home,
    )
    with pytest.raises(SlurmError, match="nice"):
        await backend.submit(replace(req, nice=-5))
