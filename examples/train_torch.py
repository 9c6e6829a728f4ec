"""Torch training with checkpoints: DDP or FSDP2, launched by torchrun (under srun), resumable at
any world size. The guide is docs/torch.md.

One process (no launcher): ``python examples/train_torch.py --uri /tmp/ckpt``. Several, on one
machine: ``torchrun --standalone --nproc-per-node=2 examples/train_torch.py --uri /tmp/ckpt``.
Under Slurm, one srun task per process (``exec srun python examples/train_torch.py`` with
MASTER_ADDR and MASTER_PORT exported), or one torchrun per node: docs/torch.md has both batch
scripts.

The model, optimizer and LR schedule are saved as they are (``save(step, {"model": model, ...})``)
and loaded back in place (``restore(into=...)``). Each step trains on one global batch drawn from
the step number and split over the ranks, so a run resumed at another world size sees the same
data. SIGUSR1/SIGTERM (Slurm's warning before the time limit, preemption): every rank saves the
same step, the save commits, and the process exits 85 ("requeue me").
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from typing import Any

import torch
import torch.distributed as dist

import clusterctl
from clusterctl.checkpoint import CheckpointManager
from clusterctl.slurm_env import RequeueOnSignal

GLOBAL_BATCH = 12


def build(parallel: str, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    if parallel == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard

    fully_shard(model[0])
    fully_shard(model)
    return model


def batch(step: int, rank: int, world: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of the step's global batch (the same global batch at any world size)."""
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(GLOBAL_BATCH, 16, generator=gen)
    y = x.sum(dim=1, keepdim=True).sin()
    return x.tensor_split(world)[rank].to(device), y.tensor_split(world)[rank].to(device)


def init_distributed() -> torch.device:
    env = os.environ
    if "RANK" not in env and "SLURM_PROCID" in env and "MASTER_ADDR" in env:  # srun, one task per process
        env.update(RANK=env["SLURM_PROCID"], WORLD_SIZE=env["SLURM_NTASKS"], LOCAL_RANK=env.get("SLURM_LOCALID", "0"))
    if "RANK" not in env:  # started without a launcher: a group of one
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
        return device
    dist.init_process_group("gloo")
    return torch.device("cpu")


@clusterctl.job_runtime()  # this rank's heartbeats; main() returning is exit 0, SystemExit(85) is 85
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", default=os.environ.get("CLUSTERCTL_CHECKPOINT_URI"), help="checkpoint URI")
    parser.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-every", type=int, default=20)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per step (to watch a stop)")
    args = parser.parse_args()
    if not args.uri:
        parser.error("--uri or CLUSTERCTL_CHECKPOINT_URI is required")

    device = init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build(args.parallel, device)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, T_max=args.steps)
    state: dict[str, Any] = {"model": model, "optim": optim, "sched": sched}

    # The manager's block enters the job's runtime (heartbeats to clusterd) and closes the manager:
    # the last save has committed when the block ends.
    with CheckpointManager(args.uri, keep=3) as ckpt:
        last = ckpt.restore(into=state)  # the newest valid step, loaded in place; None on the first run
        start = 0 if last is None else last + 1
        if last is not None:
            print(f"RESUMED from step {last} rank {rank}/{world}", flush=True)

        with RequeueOnSignal() as stop:  # with a process group, every rank sees the stop at the same step
            for step in range(start, args.steps):
                x, y = batch(step, rank, world, device)
                loss = (model(x) - y).pow(2).mean()
                loss.backward()
                optim.step()
                optim.zero_grad()
                sched.step()
                if rank == 0 and step % 10 == 0:
                    print(f"step {step} loss {loss.item():.5f}", flush=True)
                if step % args.save_every == args.save_every - 1:
                    ckpt.save(step, state)  # returns once snapshotted; uploads in the background
                if stop.requested_at(step):  # the same step on every rank: save it, wait for the commit, exit 85
                    stop.checkpoint_and_exit(ckpt, step, state)
                time.sleep(args.sleep)
    if rank == 0:
        print(f"DONE {args.steps} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
