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
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from clusterd.slurm.fake import FakeSlurm

from .conftest import auth, base_config, running
from .load import rss_kib, run_load

STACK_DIR = Path(os.environ.get("CLUSTERCTL_STACK_DIR", "/var/lib/clusterctl-stack"))


async def test_load_fake(tmp_path: Path) -> None:
    slurm = FakeSlurm.cluster()
    tokens = [auth(u)[0][1].removeprefix("Bearer ") for u in ("nobody", "daemon")]
    async with running(base_config(tmp_path), slurm) as daemon:
        before = rss_kib(os.getpid())
        report = await asyncio.to_thread(run_load, f"127.0.0.1:{daemon.port}", tokens, clients=50, seconds=4.0)
        after = rss_kib(os.getpid())
        store = {r.job_id for r in await daemon.store.list(user=None, include_finished=True, limit=10**6)}
    print(f"\nload (FakeSlurm, in-process): {sum(report.calls.values())} calls in {report.seconds:.1f}s, "
          f"{len(report.job_ids)} jobs, {dict(report.calls)}; test process RSS {before} -> {after} KiB")
    assert not report.unexpected(), report.unexpected()
    assert len(report.job_ids) == len(set(report.job_ids)) > 0
    assert set(report.job_ids) == store  # nothing lost, nothing extra
    assert len(slurm.submitted) == len(store)  # one sbatch per job: no duplicate submission
    assert report.calls["SubmitJob:OK"] > 50


def _stack_env() -> dict[str, str]:
    env_file = STACK_DIR / "env"
    env: dict[str, str] = {}
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            m = re.match(r"^export ([A-Z_][A-Z0-9_]*)=(.*)$", line.strip())
            if m:
                env[m.group(1)] = shlex.split(m.group(2))[0] if m.group(2) else ""
    return env


def _skip_or_fail(why: str) -> None:
    if os.environ.get("CLUSTERCTL_REQUIRE_STACK") == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.mark.slurm
@pytest.mark.slow
def test_load_real_stack(tmp_path: Path) -> None:
    stack = _stack_env()
    if not stack:
        _skip_or_fail("the local stack is not up: deploy/local/stack.sh up")
    slurm_env = {**os.environ, **({"SLURM_CONF": stack["SLURM_CONF"]} if "SLURM_CONF" in stack else {})}
    if subprocess.run(["squeue", "-h"], env=slurm_env, capture_output=True, timeout=30).returncode != 0:
        _skip_or_fail("slurmctld does not answer (stack stopped?)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    addr = f"127.0.0.1:{port}"
    log = (tmp_path / "clusterd.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterd.main", "serve", "--config", str(STACK_DIR / "clusterd.toml"),
         "--listen", addr, "--state-dir", str(tmp_path / "state")],
        stdout=log, stderr=log, env={**slurm_env, "CLUSTERD_POLL_INTERVAL_SECONDS": "1", "CLUSTERD_METRICS_LISTEN": ""},
    )  # fmt: skip
    try:
        _wait_serving(addr, proc)
        before = rss_kib(proc.pid)
        report = run_load(addr, [stack["CLUSTERCTL_TOKEN"], stack["CLUSTERCTL_TOKEN_BOB"]], clients=50, seconds=60)
        time.sleep(3)
        after = rss_kib(proc.pid)
        out = subprocess.run(["squeue", "--json"], env=slurm_env, capture_output=True, text=True, timeout=60).stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    import sqlite3

    db = sqlite3.connect(tmp_path / "state" / "clusterd.sqlite3")
    rows = db.execute("SELECT record_id, job_id FROM jobs WHERE job_id IS NOT NULL AND job_id != ''").fetchall()
    store = {str(job_id): rid for rid, job_id in rows}
    queue = json.loads(out).get("jobs", [])
    tags = Counter(j.get("comment", "") for j in queue if str(j.get("job_id")) in store)
    print(f"\nload (real Slurm): {sum(report.calls.values())} calls in {report.seconds:.1f}s, "
          f"{len(report.job_ids)} jobs, {dict(report.calls)}; clusterd RSS {before} -> {after} KiB")
    assert not report.unexpected(), report.unexpected()
    assert len(report.job_ids) == len(set(report.job_ids))
    assert set(report.job_ids) <= set(store), "a job the client was told about is not in the store"
    in_queue = {str(j.get("job_id")) for j in queue}
    assert set(store) <= in_queue, f"store jobs missing from squeue: {sorted(set(store) - in_queue)[:10]}"
    assert all(n == 1 for n in tags.values()), "one record submitted twice"
    assert after < before * 2 + 50_000, f"clusterd RSS grew from {before} to {after} KiB"


def _wait_serving(addr: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(addr) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < deadline:
            assert proc.poll() is None, "clusterd exited during startup"
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise AssertionError("clusterd did not become healthy")
