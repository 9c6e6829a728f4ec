"""The store under concurrent submitters: what 16 at once get beside what one gets, same run, and
SQLite's group commit beside its absence.

A submit's store work is a durable reservation (the record, its spec, the per-user bounds) and the
durable save that records Slurm's job id; this drives exactly that, from N asyncio tasks (16
users, a spec of ~4 KiB, the default per-user bounds), against the SQLite store in a temp dir and,
with ``--pg-url``, a PostgreSQL database (its tables are created there). Each user already holds
``--history`` finished records, so the per-user bounds' indexed sum has work to do.

Printed: submits per second with 1 and with 16 concurrent submitters, and their ratio (16 / 1),
for SQLite with its group commit and without it (``sqlite_store(group_commit=False)``: a transaction
and a sync per durable write), then PostgreSQL; last, what the group commit gains at 1 and at 16.
The store answers each submitter only after its commit (synced where durable).

With ``--old DIR`` (a checkout of an older tree, e.g. ``git worktree add --detach DIR REV``), the
SQLite store of this tree and of DIR (and of each ``--also DIR``) run side by side, each in its own
process on its own PYTHONPATH, ``--rounds`` times in turn, with syncing on (a temp dir on disk) and
off (``--no-sync-dir``, tmpfs: an fsync there returns at once); printed: medians, ranges and this
tree's rate / the old one's. A missing DIR is printed as missing, not dropped.

    python -m bench.store                      # SQLite
    python -m bench.store --pg-url 'postgresql:///bench?host=/run/postgresql'
    python -m bench.store --old /tmp/old-store --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterctl.v1 import jobs_pb2
from clusterd.slurm.types import JobState
from clusterd.store.bounds import UserBounds
from clusterd.store.records import Phase

if TYPE_CHECKING:  # a tree compared with --old may predate these modules: imported where used
    from clusterd.store.jobs import JobRecords
    from clusterd.store.store import Store

ROOT = Path(__file__).resolve().parent.parent

USERS = 16
# Bounds on, as in production, but never reached: the submits here stay live, and the reservation
# still sums the user's records to admit each one.
BOUNDS = UserBounds(max_live_tasks=1 << 40, max_spec_bytes=1 << 50, max_finished=1000)
SPEC = jobs_pb2.JobSpec(command=["true"], script="#!/bin/sh\n" + "x" * 4096)


async def submit(jobs: JobRecords, user: str, n: int) -> None:
    """``n`` submits' store work for ``user``, one after another."""
    for i in range(n):
        rec, _ = await jobs.reserve(user, f"{user}-{time.monotonic_ns()}-{i}", SPEC, limits=BOUNDS)
        rec.phase, rec.job_id = Phase.SUBMITTED, f"{rec.record_id}"
        await jobs.save(rec)


async def seed(jobs: JobRecords, history: int) -> None:
    """Finished records for every user (the sum a reservation reads has them), users concurrently."""

    async def one(user: str) -> None:
        for _ in range(history):
            rec, _ = await jobs.reserve(user, "", SPEC)
            rec.phase, rec.job_id, rec.terminal, rec.state = Phase.SUBMITTED, "", True, JobState.COMPLETED
            await jobs.save(rec)

    await asyncio.gather(*(one(f"user{u}") for u in range(USERS)))


async def rate(jobs: JobRecords, submitters: int, total: int) -> float:
    """Submits per second with ``submitters`` concurrent tasks sharing ``total`` submits."""
    each = max(1, total // submitters)
    started = time.perf_counter()
    await asyncio.gather(*(submit(jobs, f"user{u % USERS}", each) for u in range(submitters)))
    return each * submitters / (time.perf_counter() - started)


async def measure(store: Store, name: str, total: int, history: int, rounds: int) -> tuple[float, float]:
    await store.open()
    try:
        await seed(store.jobs, history)
        one: list[float] = []
        many: list[float] = []
        for _ in range(rounds):  # ABBA: drift on the shared machine spreads over both
            one.append(await rate(store.jobs, 1, total))
            many.append(await rate(store.jobs, 16, total))
            many.append(await rate(store.jobs, 16, total))
            one.append(await rate(store.jobs, 1, total))
        a, b = sorted(one)[len(one) // 2], sorted(many)[len(many) // 2]
        print(f"{name:<22} 1 submitter {a:8.0f}/s   16 submitters {b:8.0f}/s   16/1 {b / a:5.2f}x")
        return a, b
    finally:
        await store.close()


async def worker(directory: str, total: int, history: int) -> None:
    """One ABBA round against this process's tree's SQLite store in ``directory``; prints JSON."""
    path = Path(tempfile.mkdtemp(prefix="store-bench-", dir=directory)) / "store.sqlite3"
    try:
        from clusterd.store.store import sqlite_store

        store: Any = sqlite_store(path)
    except ImportError:  # a tree from before store/store.py: its one SQLite class
        from clusterd.store.sqlite import SqliteJobStore  # type: ignore[import-not-found, unused-ignore]

        store = SqliteJobStore(path)
    await store.open()
    try:
        jobs = getattr(store, "jobs", store)
        await seed(jobs, history)
        rates: dict[int, list[float]] = {1: [], 16: []}
        for n in (1, 16, 16, 1):
            rates[n].append(await rate(jobs, n, total))
        print(json.dumps({n: statistics.median(r) for n, r in rates.items()}))
    finally:
        await store.close()
        shutil.rmtree(path.parent)


def run_tree(tree: Path, directory: str, total: int, history: int) -> dict[int, float]:
    """One :func:`worker` round in a process importing clusterd from ``tree`` (this bench from here)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "client"), str(tree / "service"), str(ROOT)])}
    argv = [sys.executable, "-m", "bench.store", "--worker", directory, "--submits", str(total)]
    out = subprocess.run([*argv, "--history", str(history)], env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{tree}: {out.stderr.strip().splitlines()[-1:]}")
    return {int(n): v for n, v in json.loads(out.stdout.splitlines()[-1]).items()}


def compare(trees: dict[str, Path], dirs: dict[str, str], total: int, history: int, rounds: int) -> None:
    """Each tree's SQLite store per sync mode, rounds in turn; medians, ranges and ratios to ``old``.
    A tree that is not a checkout, or whose store fails, prints as missing (why)."""
    missing = {n: f"{t} is not a checkout" for n, t in trees.items() if not (t / "service/clusterd/store").is_dir()}
    rates: dict[tuple[str, str, int], list[float]] = {}
    for _ in range(rounds):
        for mode, directory in dirs.items():
            for name, tree in trees.items():
                if name in missing:
                    continue
                try:
                    for n, v in run_tree(tree, directory, total, history).items():
                        rates.setdefault((name, mode, n), []).append(v)
                except RuntimeError as exc:
                    missing[name] = str(exc)
    print(
        f"\n{'tree':<22} {'sync':<5} {'1 submitter /s (range)':>26} {'16 submitters /s (range)':>28}  this/old: 1, 16"
    )
    for mode in dirs:
        for name in trees:
            if name in missing:
                print(f"{name:<22} {mode:<5} missing ({missing[name]})")
                continue
            cells, ratios = [], []
            for n in (1, 16):
                r = sorted(rates[(name, mode, n)])
                med = statistics.median(r)
                cells.append(f"{med:8.0f} ({r[0]:.0f}-{r[-1]:.0f})")
                anchor = rates.get(("old", mode, n))
                ratios.append(f"{med / statistics.median(anchor):5.2f}x" if anchor else "    -")
            print(f"{name:<22} {mode:<5} {cells[0]:>26} {cells[1]:>28}  {ratios[0]} {ratios[1]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--submits", type=int, default=320, help="submits per measurement")
    ap.add_argument("--history", type=int, default=200, help="finished records per user beforehand")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--pg-url", default="", help="also a PostgreSQL database (libpq URL)")
    ap.add_argument("--old", default="", help="an older checkout whose SQLite store this one is compared with")
    ap.add_argument("--also", action="append", default=[], help="another checkout in that comparison")
    ap.add_argument("--no-sync-dir", default="/dev/shm", help="tmpfs for the unsynced rows ('' for none)")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        asyncio.run(worker(args.worker, args.submits, args.history))
        return
    from clusterd.store.store import postgres_store, sqlite_store

    with tempfile.TemporaryDirectory(prefix="store-bench-") as tmp:
        plain = sqlite_store(Path(tmp) / "plain.sqlite3", group_commit=False)
        p1, p16 = asyncio.run(measure(plain, "sqlite", args.submits, args.history, args.rounds))
        grouped = sqlite_store(Path(tmp) / "grouped.sqlite3")
        g1, g16 = asyncio.run(measure(grouped, "sqlite, group commit", args.submits, args.history, args.rounds))
    if args.pg_url:
        asyncio.run(measure(postgres_store(args.pg_url), "postgresql", args.submits, args.history, args.rounds))
    print(f"group commit / without: 1 submitter {g1 / p1:5.2f}x   16 submitters {g16 / p16:5.2f}x")
    if not args.old:
        print("\nold store: missing (--old DIR names a checkout to compare this store with)")
        return
    trees = {"old": Path(args.old), **{Path(p).name: Path(p) for p in args.also}, "this": ROOT}
    dirs = {"on": tempfile.gettempdir(), **({"off": args.no_sync_dir} if args.no_sync_dir else {})}
    compare(trees, dirs, args.submits, args.history, args.rounds)


if __name__ == "__main__":
    main()
