"""A stop signal that reaches one rank: with a process group every rank checkpoints the same step,
so the final save commits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clusterctl.checkpoint import CheckpointManager
from clusterctl.slurm_env import REQUEUE_EXIT_CODE
from tests.support.ports import free_port

pytest.importorskip("torch")

WORKER = textwrap.dedent("""
    import os, signal, sys, time, torch, torch.distributed as dist
    from clusterctl.checkpoint import CheckpointConfig, CheckpointManager
    from clusterctl.slurm_env import RequeueOnSignal
    uri, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    ckpt = CheckpointManager(uri, config=CheckpointConfig(commit_timeout=30, poll_initial=0.01, gc_on_commit=False))
    weights = torch.zeros(4)
    with RequeueOnSignal() as stop:
        for step in range(1000):
            grad = torch.ones(4)
            dist.all_reduce(grad)  # the training step: ranks in lockstep
            weights += grad
            if rank == world - 1 and step == 5:
                os.kill(os.getpid(), signal.SIGUSR1)  # only the last rank is told to stop
            time.sleep(0.01 * rank)  # and the ranks poll at different moments
            if stop.requested:
                stop.checkpoint_and_exit(ckpt, step, {"step": step, "weights": weights})
    sys.exit(3)  # never reached: every rank stops at step 5
""")


def test_every_rank_checkpoints_the_step_one_rank_was_signalled_at(tmp_path: Path) -> None:
    uri, port, world = str(tmp_path / "ckpt"), str(free_port()), 3
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "CLUSTERCTL_"))}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, uri, str(r), str(world), port],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    for p in procs:
        _, stderr = p.communicate(timeout=120)
        assert p.returncode == REQUEUE_EXIT_CODE, stderr[-3000:]
    with CheckpointManager(uri, rank=0, world_size=world) as ckpt:
        assert ckpt.steps() == [5]
        state = ckpt.restore()
    assert state["step"] == 5 and state["weights"].tolist() == [18.0] * 4  # 6 steps of 3 ranks' ones
