"""A small numpy MLP trained with checkpoints: the job the demo and the end-to-end tests run.

Run under Slurm (``srun python examples/train.py``) or alone. It resumes from the newest valid
checkpoint in ``--ckpt`` (default: $CLUSTERCTL_CHECKPOINT_URI), saves every ``--every`` steps in the
background, and on SIGUSR1/SIGTERM (Slurm's warning before the time limit, or preemption)
checkpoints and exits with the "requeue me" code so that clusterd brings it back.

Every step prints ``STEP <n> rank <r> loss <x>``; the tests read these lines to prove that a
restart resumed where the last committed checkpoint left off. The process runs in the job's
runtime (``clusterctl.job_runtime()``: heartbeats to clusterd's failure detector, and the exit
status as the last beat; a no-op outside a clusterd job), and each step is reported to it
(``heartbeat.report_step``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import threading
import time

import numpy as np

import clusterctl
from clusterctl import heartbeat
from clusterctl.checkpoint import CheckpointConfig, CheckpointManager
from clusterctl.slurm_env import RequeueOnSignal, rank_and_world_size


class BigModel:
    """Stands for a model much bigger than this one: its snapshot blocks the step for ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def state_dict(self) -> dict[str, float]:
        time.sleep(self.seconds)
        return {"seconds": self.seconds}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.seconds = state["seconds"]


def init_params(rng: np.random.Generator, sizes: list[int]) -> dict[str, np.ndarray]:
    params = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        params[f"w{i}"] = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        params[f"b{i}"] = np.zeros(fan_out, np.float32)
    return params


def batch(step: int, rank: int, size: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic data per (step, rank): a resumed run sees exactly the batches it would have."""
    rng = np.random.default_rng([step, rank])
    x = rng.standard_normal((size, dim)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    return x, y


def train_step(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, lr: float) -> float:
    """One SGD step of a tanh MLP on mean squared error (manual backprop)."""
    layers = len(params) // 2
    acts = [x]
    for i in range(layers):
        z = acts[-1] @ params[f"w{i}"] + params[f"b{i}"]
        acts.append(np.tanh(z) if i < layers - 1 else z)
    err = acts[-1] - y
    loss = float(np.mean(err**2))
    grad = 2 * err / len(x)
    for i in reversed(range(layers)):
        gw = acts[i].T @ grad
        gb = grad.sum(axis=0)
        if i > 0:
            grad = (grad @ params[f"w{i}"].T) * (1 - acts[i] ** 2)
        params[f"w{i}"] -= lr * gw
        params[f"b{i}"] -= lr * gb
    return loss


def blocked_for_good() -> None:
    """A main thread that never returns while the process lives (a collective that never completes)."""
    threading.Event().wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ckpt", default=os.environ.get("CLUSTERCTL_CHECKPOINT_URI", ""))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=10, help="checkpoint interval in steps")
    parser.add_argument(
        "--interval",
        default=None,
        help="checkpoint interval in seconds, or 'auto' (clusterd's advice): replaces --every; one rank only",
    )
    parser.add_argument("--auto-first", type=float, default=300.0, help="--interval auto: seconds to the first save")
    parser.add_argument("--save-stall", type=float, default=0.0, help="extra seconds each save blocks (a big model)")
    parser.add_argument("--timestamps", action="store_true", help="end each STEP line with the wall time")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step (simulated work)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--fail-at", type=int, default=-1, help="exit 1 at this step (crash-loop tests)")
    parser.add_argument("--exit-code", type=int, default=1)
    parser.add_argument(
        "--crash-rank",
        type=int,
        default=-1,
        help="this rank alone exits 1 at --crash-at, in the first run only (a transient fault)",
    )
    parser.add_argument("--crash-at", type=int, default=-1)
    parser.add_argument(
        "--block-rank",
        type=int,
        default=-1,
        help="this rank's main thread blocks for good at --block-at (its beats go on), in the first run only",
    )
    parser.add_argument("--block-at", type=int, default=-1)
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank's steps take --slow-factor times longer")
    parser.add_argument("--slow-factor", type=float, default=1.0)
    args = parser.parse_args(argv)
    if not args.ckpt:
        parser.error("--ckpt or CLUSTERCTL_CHECKPOINT_URI is required")

    rank, world = rank_and_world_size()
    node = os.environ.get("SLURMD_NODENAME", "-")
    interval = args.interval if args.interval in (None, "auto") else float(args.interval)
    ckpt = CheckpointManager(
        args.ckpt, keep=3, interval=interval, config=CheckpointConfig(auto_first_interval=args.auto_first)
    )
    dim = 16
    state = ckpt.restore()
    if state is None:
        params = init_params(np.random.default_rng(0), [dim, args.hidden, args.hidden, 1])
        start = 0
        print(f"START fresh rank {rank}/{world} node {node}", flush=True)
    else:
        params = {k: np.array(v) for k, v in state["params"].items()}
        start = int(state["step"]) + 1
        print(
            f"RESUMED from step {state['step']} rank {rank}/{world} node {node} "
            f"restart {os.environ.get('SLURM_RESTART_COUNT', '0')} "
            f"resume_step {ckpt.last_restored_step}",
            flush=True,
        )

    with RequeueOnSignal() as stop:
        for step in range(start, args.steps):
            if step == args.fail_at:
                print(f"FAIL at step {step}", flush=True)
                return args.exit_code
            if rank == args.crash_rank and step == args.crash_at and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
                print(f"CRASH rank {rank} at step {step}", flush=True)
                return 1
            if rank == args.block_rank and step == args.block_at and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
                print(f"BLOCK rank {rank} at step {step}", flush=True)
                blocked_for_good()
            x, y = batch(step, rank, 64, dim)
            loss = train_step(params, x, y, lr=0.05)
            stamp = f" t {time.time():.3f}" if args.timestamps else ""
            print(f"STEP {step} rank {rank} loss {loss:.5f}{stamp}", flush=True)
            heartbeat.report_step(step)
            if args.step_seconds:
                time.sleep(args.step_seconds * (args.slow_factor if rank == args.slow_rank else 1.0))
            snapshot = {"params": params, "step": step, "meta": {"world": world, "loss": loss}}
            if ckpt.due() if interval is not None else (step + 1) % args.every == 0:
                ckpt.save(step, {**snapshot, "big": BigModel(args.save_stall)} if args.save_stall else snapshot)
            if stop.requested_at(step):  # every rank stops at the same step (agreed through clusterd)
                print(f"SIGNAL at step {step}: checkpointing and asking to be requeued", flush=True)
                stop.checkpoint_and_exit(ckpt, step, snapshot)
    ckpt.wait()
    ckpt.close()
    stamp = f" t {time.time():.3f}" if args.timestamps else ""
    print(f"DONE rank {rank} at step {args.steps - 1}{stamp}", flush=True)
    return 0


if __name__ == "__main__":
    with clusterctl.job_runtime():  # the exit status below leaves the block: it is this rank's last beat
        sys.exit(main())
