"""Elastic training: state sharded over the current world, resumed at whatever world size is given.

Submit with a node range (``clusterctl submit -N 2-3 ...``, no --ntasks-per-node: Slurm derives
the task count from MIN and would then never start more than MIN nodes) and run one task per node
(clusterd's command submissions do). Each rank owns a block of rows of one global parameter
matrix and its momentum, saved as :class:`Sharded` leaves; the step and the world size it was
saved at are :class:`Replicated`. After a node is lost for good, Slurm may start the job on
fewer nodes: ``restore(template=...)`` then gives each rank its rows for the new world, read from
whichever old ranks wrote them.

Every row follows its own recurrence (elementwise numpy only), so the global state after step
``s`` does not depend on how the rows were split: a restored state is checked against a
recomputation of step ``s`` from scratch (``VERIFIED``), and so is the final one. The job's own
log proves the resharding: ``RESUMED from step <s> rank <r>/<w> node <n> saved_world <N>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import clusterctl
from clusterctl import heartbeat
from clusterctl.checkpoint import CheckpointManager, Replicated, Sharded
from clusterctl.slurm_env import RequeueOnSignal, rank_and_world_size

ROWS, COLS = 13, 8  # 13 rows: an uneven split at 2 and at 3 ranks


def rows_of(rank: int, world: int) -> tuple[int, int]:
    """[lo, hi) of the rows ``rank`` owns at ``world`` ranks (torch.chunk-like)."""
    size = -(-ROWS // world)
    lo = min(ROWS, rank * size)
    return lo, min(ROWS, lo + size)


def advance(w: np.ndarray, m: np.ndarray, lo: int, step: int) -> None:
    """One step for rows lo.. (in place): a momentum update driven by (step, global row, column)."""
    rows = np.arange(lo, lo + len(w), dtype=np.float64)[:, None]
    cols = np.arange(COLS, dtype=np.float64)[None, :]
    grad = np.sin(0.1 * step + rows + 0.01 * cols) + 0.001 * w
    m *= 0.9
    m += grad
    w -= 0.01 * m


def state_at(step: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows lo:hi of (parameters, momentum) after ``step``, recomputed from step 0."""
    w = np.ones((hi - lo, COLS)) * np.arange(lo, hi, dtype=np.float64)[:, None]
    m = np.zeros((hi - lo, COLS))
    for s in range(step + 1):
        advance(w, m, lo, s)
    return w, m


def sharded_state(w: np.ndarray, m: np.ndarray, lo: int, step: int, world: int) -> dict[str, object]:
    return {
        "w": Sharded(w, (ROWS, COLS), lo),
        "m": Sharded(m, (ROWS, COLS), lo),
        "step": Replicated(step),
        "world": Replicated(world),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ckpt", default=os.environ.get("CLUSTERCTL_CHECKPOINT_URI", ""))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=10, help="checkpoint interval in steps")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step (simulated work)")
    args = parser.parse_args(argv)
    if not args.ckpt:
        parser.error("--ckpt or CLUSTERCTL_CHECKPOINT_URI is required")

    rank, world = rank_and_world_size()
    node = os.environ.get("SLURMD_NODENAME", "-")
    lo, hi = rows_of(rank, world)
    ckpt = CheckpointManager(args.ckpt, keep=3)
    template = sharded_state(np.empty((hi - lo, COLS)), np.empty((hi - lo, COLS)), lo, 0, world)
    state = ckpt.restore(template=template)
    if state is None:
        w, m = state_at(-1, lo, hi)
        start = 0
        print(f"START fresh rank {rank}/{world} node {node}", flush=True)
    else:
        saved = int(state["step"])
        w, m = np.asarray(state["w"]), np.asarray(state["m"])
        want_w, want_m = state_at(saved, lo, hi)
        if not (np.array_equal(w, want_w) and np.array_equal(m, want_m)):
            print(f"MISMATCH restored step {saved} rank {rank}/{world} rows {lo}:{hi}", flush=True)
            return 1
        start = saved + 1
        print(f"RESUMED from step {saved} rank {rank}/{world} node {node} saved_world {state['world']}", flush=True)
        print(f"VERIFIED restored step {saved} rank {rank}/{world} rows {lo}:{hi}", flush=True)

    with RequeueOnSignal() as stop:
        for step in range(start, args.steps):
            advance(w, m, lo, step)
            print(f"STEP {step} rank {rank}", flush=True)
            heartbeat.report_step(step)
            if args.step_seconds:
                time.sleep(args.step_seconds)
            snapshot = sharded_state(w, m, lo, step, world)
            if (step + 1) % args.every == 0:
                ckpt.save(step, snapshot)
            if stop.requested_at(step):  # every rank stops at the same step (agreed through clusterd)
                print(f"SIGNAL at step {step}: checkpointing and asking to be requeued", flush=True)
                stop.checkpoint_and_exit(ckpt, step, snapshot)
    ckpt.wait()
    ckpt.close()
    want_w, _ = state_at(args.steps - 1, lo, hi)
    ok = np.array_equal(w, want_w)
    print(f"DONE rank {rank}/{world} at step {args.steps - 1} final state {'verified' if ok else 'WRONG'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    with clusterctl.job_runtime():  # heartbeats, and the exit status as this rank's last beat
        sys.exit(main())
