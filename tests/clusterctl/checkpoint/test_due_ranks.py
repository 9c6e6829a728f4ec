"""``due()`` across two gloo ranks while background saves agree on their commits: both ranks save
the same steps, and every save commits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.ports import free_port

pytest.importorskip("torch")

WORKER = textwrap.dedent("""
    import json, sys, time, torch, torch.distributed as dist
    from clusterctl.checkpoint import CheckpointConfig, CheckpointManager
    uri, rank, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    config = CheckpointConfig(commit_timeout=20, due_timeout=20, poll_initial=0.01, gc_on_commit=False, max_in_flight=2)
    ckpt = CheckpointManager(uri, interval=0.05, config=config)
    weights = torch.zeros(1 << 18)
    saved, polls = [], 0
    for step in range(120):
        grad = torch.ones(4)
        dist.all_reduce(grad)  # the training step: ranks in lockstep
        time.sleep(0.002 * (rank + 1))
        if ckpt.due():  # a background save of an earlier step is usually still agreeing
            saved.append(step)
            ckpt.save(step, {"w": weights + step})
    ckpt.wait()
    print(json.dumps({"saved": saved, "steps": ckpt.steps()}), flush=True)
    ckpt.close()
    dist.destroy_process_group()
""")


def test_two_ranks_agree_on_due_steps_while_saves_commit_in_the_background(tmp_path: Path) -> None:
    uri, port = str(tmp_path / "ckpt"), str(free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "CLUSTERCTL_"))}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, uri, str(r), port],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=90)
            assert p.returncode == 0, stderr[-3000:]
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert outs[0]["saved"] == outs[1]["saved"] and len(outs[0]["saved"]) >= 2
    assert outs[0]["steps"][-1] == outs[0]["saved"][-1]  # the last committed (wait() raised for none)
