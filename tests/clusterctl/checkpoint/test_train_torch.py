"""examples/train_torch.py as torchrun starts it: FSDP2 over gloo, stopped by a signal to one rank
(every rank saves the same step, and it commits), then resumed at another world size."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clusterctl.slurm_env import REQUEUE_EXIT_CODE
from tests.support.paths import ROOT
from tests.support.ports import free_port

pytest.importorskip("torch")
EXAMPLE = str(ROOT / "examples" / "train_torch.py")


def launch(uri: str, world: int, *args: str) -> list[subprocess.Popen[str]]:
    """What torchrun does: one process per rank with RANK/WORLD_SIZE/LOCAL_RANK and the rendezvous."""
    port = str(free_port())
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "CLUSTERCTL_"))}
    return [
        subprocess.Popen(
            [sys.executable, EXAMPLE, "--uri", uri, "--parallel", "fsdp", *args],
            env={
                **base,
                "RANK": str(r),
                "LOCAL_RANK": str(r),
                "WORLD_SIZE": str(world),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]


def test_stopped_by_a_signal_then_resumed_at_another_world_size(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    procs = launch(uri, 2, "--steps", "1000", "--save-every", "7", "--sleep", "0.02")
    assert procs[0].stdout is not None
    for line in procs[0].stdout:
        if line.startswith("step 10 "):
            procs[1].send_signal(signal.SIGUSR1)  # one rank only, as a signal may reach one first
            break
    for p in procs:
        _, stderr = p.communicate(timeout=120)
        assert p.returncode == REQUEUE_EXIT_CODE, stderr[-3000:]

    from clusterctl.checkpoint import CheckpointManager

    with CheckpointManager(uri, rank=0, world_size=1) as ckpt:
        stopped = ckpt.latest_step()
    assert stopped is not None and stopped >= 10  # the step the ranks stopped at, committed

    [proc] = launch(uri, 1, "--steps", str(stopped + 3), "--save-every", "1000")
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert re.findall(r"RESUMED from step (\d+) rank 0/1", stdout) == [str(stopped)]
    assert f"DONE {stopped + 3} steps" in stdout
