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


def test_default_submission_is_accepted_and_wait_reports_the_outcome(daemon: Daemon, tmp_path: Path) -> None:
    # -D/-o: the job runs as alice, who cannot write into pytest's root-only tmp_path.
    common = ("submit", "-n", "1", "-t", "2", "-D", "/tmp", "-o", "/dev/null", "--wait", "--parsable")
    ok = clusterctl(daemon, *common, "--wrap", "test -n \"$HOME\"", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().isdigit()  # --parsable: the job id and nothing else
    failed = clusterctl(daemon, *common, "--wrap", "exit 3", cwd=tmp_path)
    assert failed.returncode != 0, failed.stdout
    assert failed.stderr == ""

