"""Load: 50 concurrent clients submitting, watching and cancelling; no job lost or duplicated.

``test_load_fake`` runs the driver for a few seconds against an in-process clusterd over FakeSlurm
(fast, every CI run). ``test_load_real_stack`` (marked ``slurm``) runs it for 60 s against a
clusterd process in front of the local stack's real Slurm, reconciles the store against squeue,
and prints clusterd's RSS before and after.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest

from clusterd.slurm.fake import FakeSlurm
from tests.clusterd.conftest import auth, base_config, running
from tests.support.daemon import Daemon
from tests.support.stack import Stack

from .load import rss_kib, run_load


async def test_load_fake(tmp_path: Path) -> None:
    slurm = FakeSlurm.cluster()
    tokens = [auth(u)[0][1].removeprefix("Bearer ") for u in ("nobody", "daemon")]
    async with running(base_config(tmp_path), slurm) as daemon:
        before = rss_kib(os.getpid())
        report = await asyncio.to_thread(run_load, f"127.0.0.1:{daemon.port}", tokens, clients=50, seconds=4.0)
        after = rss_kib(os.getpid())
        store = {r.job_id for r in await daemon.store.jobs.list(user=None, include_finished=True, limit=10**6)}
    print(
        f"\nload (FakeSlurm, in-process): {sum(report.calls.values())} calls in {report.seconds:.1f}s, "
        f"{len(report.job_ids)} jobs, {dict(report.calls)}; test process RSS {before} -> {after} KiB"
    )
    assert not report.unexpected(), report.unexpected()
    assert len(report.job_ids) == len(set(report.job_ids)) > 0
    assert set(report.job_ids) == store  # nothing lost, nothing extra
    assert len(slurm.submitted) == len(store)  # one sbatch per job: no duplicate submission
    assert report.calls["SubmitJob:OK"] > 50


@pytest.mark.slurm
@pytest.mark.slow
def test_load_real_stack(stack: Stack, tmp_path: Path) -> None:
    if stack.run("squeue", "-h", check=False).returncode != 0:
        if os.environ.get("CLUSTERCTL_REQUIRE_STACK") == "1":
            pytest.fail("slurmctld does not answer (stack stopped?)")
        pytest.skip("slurmctld does not answer (stack stopped?)")
    daemon = Daemon(stack, tmp_path / "state")
    daemon.start()
    assert daemon.proc is not None
    try:
        before = rss_kib(daemon.proc.pid)
        report = run_load(daemon.addr, [stack.tokens["alice"], stack.tokens["bob"]], clients=50, seconds=60)
        time.sleep(3)
        after = rss_kib(daemon.proc.pid)
        out = stack.run("squeue", "--json").stdout
    finally:
        daemon.stop()
    import sqlite3

    db = sqlite3.connect(tmp_path / "state" / "clusterd.sqlite3")
    rows = db.execute("SELECT record_id, job_id FROM jobs WHERE job_id IS NOT NULL AND job_id != ''").fetchall()
    store = {str(job_id): rid for rid, job_id in rows}
    # Cancels the rate limit refused leave jobs behind (sleeps with no time limit): they would hold
    # the stack's nodes for every later test.
    ids = sorted(store)
    for at in range(0, len(ids), 500):
        stack.run("scancel", *ids[at : at + 500], check=False)
    queue = json.loads(out).get("jobs", [])
    tags = Counter(j.get("comment", "") for j in queue if str(j.get("job_id")) in store)
    print(
        f"\nload (real Slurm): {sum(report.calls.values())} calls in {report.seconds:.1f}s, "
        f"{len(report.job_ids)} jobs, {dict(report.calls)}; clusterd RSS {before} -> {after} KiB"
    )
    assert not report.unexpected(), report.unexpected()
    assert len(report.job_ids) == len(set(report.job_ids))
    assert set(report.job_ids) <= set(store), "a job the client was told about is not in the store"
    in_queue = {str(j.get("job_id")) for j in queue}
    assert set(store) <= in_queue, f"store jobs missing from squeue: {sorted(set(store) - in_queue)[:10]}"
    assert all(n == 1 for n in tags.values()), "one record submitted twice"
    assert after < before * 2 + 50_000, f"clusterd RSS grew from {before} to {after} KiB"
