"""One process of a rank-resolution test: ``python ranks_worker.py MODE URI [RANK PORT]``; prints one JSON line.

``env``: started by torchrun, no process group (ranks from RANK/WORLD_SIZE). ``group``: started by
torchrun, ``init_process_group`` called after the manager was created. ``late``: a plain process
told its rank on the command line, which joins a gloo group after creating the manager. ``dup``: a
plain process with no group whose SLURM_PROCID it shares with another. Every mode saves a tensor
holding this process's rank at step 1 and, when that committed, restores it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist

from clusterctl.checkpoint import CheckpointConfig, CheckpointError, CheckpointManager


def main() -> None:
    mode, uri = sys.argv[1], sys.argv[2]
    config = CheckpointConfig(commit_timeout=30, poll_initial=0.01, poll_max=0.1, gc_on_commit=False)
    ckpt = CheckpointManager(uri, config=config)
    out: dict[str, object] = {"before": [ckpt.rank, ckpt.world_size]}
    if mode == "group":
        dist.init_process_group("gloo")
    elif mode == "late":
        rank, port = int(sys.argv[3]), sys.argv[4]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    me = float(dist.get_rank() if dist.is_initialized() else os.environ.get("RANK", sys.argv[-1]))
    try:
        ckpt.save(1, {"t": torch.full((4,), me)}).result()
        out["committed"] = True
        out["restored"] = float(ckpt.restore()["t"][0])
    except CheckpointError as exc:
        out["committed"] = False
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["after"] = [ckpt.rank, ckpt.world_size]
    out["me"] = me
    with contextlib.suppress(CheckpointError):  # already reported above
        ckpt.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
