"""What a tenant names as a file or directory is read with the tenant's rights, cheaply, on the stack.

A clusterd of this worktree's code in front of the stack's Slurm; alice is the hostile tenant. She
asks for a 200,000,000-digit padding in her output name, points her checkpoint URI at root's
checkpoint through a symbolic link swapped in after submitting, plants a link and a FIFO below her
own checkpoint directory: the service stays small and answering, shows her nothing of root's, and
no view hangs. The stack's own clusterd log is root's alone.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def files_daemon(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    env = {"CLUSTERD_VIEWS__CHECKPOINT_CACHE_SECONDS": "0", "CLUSTERD_SUPERVISOR__PROGRESS_RETRY_SECONDS": "1"}
    d = Daemon(stack, tmp_path_factory.mktemp("clusterd-files"), extra_env=env)
    d.start()
    yield d
    d.stop()


@pytest.fixture
def root_checkpoint() -> Iterator[Path]:
    """A checkpoint only root may read: a committed step 77 in a 0700 directory."""
    path = Path(tempfile.mkdtemp(prefix="root-ckpt-", dir="/var/tmp"))
    (path / "commits").mkdir()
    marker = {"step": 77, "world_size": 1, "total_bytes": 123456, "created": time.time()}
    (path / "commits" / "000000000077.json").write_text(json.dumps(marker))
    yield path
    shutil.rmtree(path)


def _rss_mb(daemon: Daemon) -> float:
    assert daemon.proc is not None
    status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) / 1024


def _give_alice(*paths: Path) -> None:
    alice = pwd.getpwnam("alice")
    for path in paths:
        os.chown(path, alice.pw_uid, alice.pw_gid, follow_symlinks=False)


def test_a_huge_output_width_is_filled_as_slurm_fills_it_and_costs_nothing(
    files_daemon: Daemon, alice_dir: Path
) -> None:
    alice, bob = files_daemon.client("alice"), files_daemon.client("bob")
    spec = jobs_pb2.JobSpec(
        name="width", command=["echo", "padded"], submit_directory=str(alice_dir), stdout_path="out-%200000000n.log"
    )
    job = alice.submit(spec).job
    wait_for(lambda: alice.get(job.job_id).terminal, timeout=120, what="the job to end")
    before = _rss_mb(files_daemon)
    started = time.monotonic()
    chunks = list(alice.read_log(job.job_id))
    took = time.monotonic() - started
    assert b"".join(c.data for c in chunks) == b"padded\n"
    assert chunks[0].path == f"{alice_dir}/out-0000000000.log"  # the file slurmstepd wrote: width 10
    assert took < 5 and _rss_mb(files_daemon) - before < 50, (took, before, _rss_mb(files_daemon))
    started = time.monotonic()
    bob.list_jobs()  # another tenant is served as usual
    assert time.monotonic() - started < 2


def test_checkpoint_views_show_nothing_of_roots_and_never_hang(
    files_daemon: Daemon, alice_dir: Path, root_checkpoint: Path
) -> None:
    alice = files_daemon.client("alice")
    ckpt = alice_dir / "ckpt"
    (ckpt / "commits").mkdir(parents=True)
    _give_alice(ckpt, ckpt / "commits")
    job = alice.submit(
        jobs_pb2.JobSpec(
            name="ckpt-swap", command=["true"], submit_directory=str(alice_dir), checkpoint_uri=f"file://{ckpt}"
        )
    ).job

    # The swap after submitting: her checkpoint path now links to root's checkpoint.
    shutil.rmtree(ckpt)
    ckpt.symlink_to(root_checkpoint, target_is_directory=True)
    _give_alice(ckpt)
    listing = alice.checkpoints(job.job_id)
    assert not listing.checkpoints and "permission denied for alice" in listing.error

    # Her own directory again, with root's commits/ linked in, then a FIFO named like a marker.
    ckpt.unlink()
    ckpt.mkdir()
    (ckpt / "commits").symlink_to(root_checkpoint / "commits", target_is_directory=True)
    _give_alice(ckpt, ckpt / "commits")
    listing = alice.checkpoints(job.job_id)
    assert not listing.checkpoints and "not a directory of the job's user" in listing.error  # a link: refused
    (ckpt / "commits").unlink()
    (ckpt / "commits").mkdir()
    os.mkfifo(ckpt / "commits" / "000000000005.json")
    _give_alice(ckpt / "commits", ckpt / "commits" / "000000000005.json")
    for _ in range(3):  # more views than the view has threads: a hung read would starve the third
        started = time.monotonic()
        listing = alice.checkpoints(job.job_id)
        assert time.monotonic() - started < 5
        assert not listing.checkpoints and not listing.error  # a FIFO is no marker: not listed, never opened


def test_the_users_own_file_checkpoint_still_lists_and_verifies(files_daemon: Daemon, alice_dir: Path) -> None:
    import numpy as np

    from clusterctl.checkpoint import CheckpointManager

    ckpt = alice_dir / "own-ckpt"
    manager = CheckpointManager(f"file://{ckpt}", rank=0, world_size=1)
    for step in (1, 2):
        manager.save(step, {"w": np.arange(1000, dtype=np.float32) * step}).result(timeout=60)
    manager.close()
    for path in [ckpt, *ckpt.rglob("*")]:
        _give_alice(path)
    alice = files_daemon.client("alice")
    job = alice.submit(
        jobs_pb2.JobSpec(
            name="ckpt-own", command=["true"], submit_directory=str(alice_dir), checkpoint_uri=f"file://{ckpt}"
        )
    ).job

    def verified() -> jobs_pb2.ListJobCheckpointsResponse | None:
        listing = alice.checkpoints(job.job_id)
        assert not listing.error, listing.error
        return listing if listing.checkpoints and listing.checkpoints[-1].verification == "verified" else None

    listing = wait_for(verified, timeout=30, what="the newest step verified")
    assert [c.step for c in listing.checkpoints] == [1, 2] and listing.checkpoints[-1].bytes >= 4000


def test_progress_of_a_file_prefix_is_read_as_its_user(
    files_daemon: Daemon, alice_dir: Path, root_checkpoint: Path
) -> None:
    alice = files_daemon.client("alice")
    ckpt = alice_dir / "ckpt"
    ckpt.mkdir()
    _give_alice(ckpt)
    job = alice.submit(
        jobs_pb2.JobSpec(
            name="ckpt-progress",
            command=["sleep", "60"],
            submit_directory=str(alice_dir),
            checkpoint_uri=f"file://{ckpt}",
        )
    ).job
    try:
        ckpt.rmdir()
        ckpt.symlink_to(root_checkpoint, target_is_directory=True)
        _give_alice(ckpt)
        wait_for(lambda: alice.get(job.job_id).state == jobs_pb2.JOB_STATE_RUNNING, timeout=60, what="running")

        def refused() -> bool:
            return any(
                "checkpoint progress" in r.get("message", "") and "permission denied for alice" in r.get("message", "")
                for r in files_daemon.log_records()
            )

        wait_for(refused, timeout=30, what="a progress read refused as alice")
        assert alice.get(job.job_id).checkpoint_step < 77  # root's step never shows (-1: none known)
    finally:
        alice.cancel(job.job_id)


def test_the_stacks_clusterd_log_is_roots_alone(stack: Stack) -> None:
    mode = os.stat(stack.dir / "clusterd.log").st_mode
    assert stat.S_IMODE(mode) & 0o077 == 0, oct(mode)
