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

    python -m bench.store                      # SQLite
    python -m bench.store --pg-url 'postgresql:///bench?host=/run/postgresql'
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from clusterctl.v1 import jobs_pb2
from clusterd.slurm.types import JobState
from clusterd.store.bounds import UserBounds
from clusterd.store.jobs import JobRecords
from clusterd.store.records import Phase
from clusterd.store.store import Store, postgres_store, sqlite_store

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
    """Finished records for every user (the sum a reservation reads has them)."""
    for u in range(USERS):
        for _ in range(history):
            rec, _ = await jobs.reserve(f"user{u}", "", SPEC)
            rec.phase, rec.job_id, rec.terminal, rec.state = Phase.SUBMITTED, "", True, JobState.COMPLETED
            await jobs.save(rec)


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--submits", type=int, default=320, help="submits per measurement")
    ap.add_argument("--history", type=int, default=200, help="finished records per user beforehand")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--pg-url", default="", help="also a PostgreSQL database (libpq URL)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="store-bench-") as tmp:
        plain = sqlite_store(Path(tmp) / "plain.sqlite3", group_commit=False)
        p1, p16 = asyncio.run(measure(plain, "sqlite", args.submits, args.history, args.rounds))
        grouped = sqlite_store(Path(tmp) / "grouped.sqlite3")
        g1, g16 = asyncio.run(measure(grouped, "sqlite, group commit", args.submits, args.history, args.rounds))
    if args.pg_url:
        asyncio.run(measure(postgres_store(args.pg_url), "postgresql", args.submits, args.history, args.rounds))
    print(f"group commit / without: 1 submitter {g1 / p1:5.2f}x   16 submitters {g16 / p16:5.2f}x")


if __name__ == "__main__":
    main()
