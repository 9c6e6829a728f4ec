"""``clusterctl submit`` as a user types it, against a real clusterd and Slurm.

The request the CLI builds by default (the caller's whole environment for --export=ALL, the
submit directory, the script name) must be one a real server accepts, and ``--wait`` must end
with the job's outcome. Exact exit codes and what the job saw are compared with sbatch's in the
side-by-side suite; this only checks the CLI's end of it, quickly.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon import Daemon

pytestmark = pytest.mark.slurm


def clusterctl(daemon: Daemon, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clusterctl.cli.main", *argv],
        env=daemon.cli_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_default_submission_is_accepted_and_wait_reports_the_outcome(daemon: Daemon, alice_dir: Path) -> None:
    # Run from a directory of alice's own, as she would: the job writes slurm-%j.out there, as her.
    common = ("submit", "-n", "1", "-t", "2", "--wait", "--parsable")
    ok = clusterctl(daemon, *common, "--wrap", 'test -n "$HOME"', cwd=alice_dir)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().isdigit()  # --parsable: the job id and nothing else
    failed = clusterctl(daemon, *common, "--wrap", "exit 3", cwd=alice_dir)
    assert failed.returncode == 3, failed.stdout  # the job's own exit code, as a shell reports it
    assert failed.stderr == ""
