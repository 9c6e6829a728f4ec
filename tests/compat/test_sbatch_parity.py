"""sbatch's options on each release and backend variant: sbatch (the release's own, as alice) and
``clusterctl submit`` from the same directory make Slurm hold the same job (tests.support.parity)."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemon import Daemon
from tests.support.parity import check_every_option
from tests.support.stack import Stack

# slurmrestd v0.0.40 and v0.0.41 (24.11) give every job OOMKillStep=0 and have no key to leave it
# unset as sbatch does; later versions are sent "unset".
_UNLIKE = {"v0.0.40": frozenset({"OOMKillStep"}), "v0.0.41": frozenset({"OOMKillStep"})}


def test_every_option_holds_the_same_job_as_sbatch(compat_daemon: Daemon, stack: Stack, alice_dir: Path) -> None:
    api = compat_daemon.extra_env.get("CLUSTERD_SLURM__RESTD_API_VERSION", "")
    check_every_option(compat_daemon, stack, alice_dir, unlike=_UNLIKE.get(api, frozenset()))
