"""clusterd's memory and ListJobs latency with many maximum-size records.

10 users each submit 200 jobs whose specs are as large as the service accepts under its default
limits: a 1 MiB script and 95 environment values of 32 KiB, just under the 4 MiB message limit:
2,000 records, ~7.9 GB of specs. The default per-user bounds (1,000 live tasks, 1 GiB of specs)
admit this load. clusterd runs in a child process over FakeSlurm: what is measured is the number
and size of records, not Slurm, and 2,000 sleeping jobs would occupy the shared stack. The poller
runs as in production (2 s interval), so its reconciling of new records is part of the load.

Printed: the child's RSS (/proc VmRSS) before and after loading and after the lists, its peak
(VmHWM); ListJobs p50/p95 for each user's own 200 records and for an admin's ``user="*"`` (the
1,000 newest), against the anchor of the same call on the empty store, measured in the same run.
And the cost of ``synchronous=FULL`` for one record save, side by side with NORMAL, on this disk.

    python -m bench.tenancy                      # 10 users x 200 specs of ~3.97 MiB
    python -m bench.tenancy --users 2 --per-user 20 --lists 10   # a quick look
    MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=1048576 python -m bench.tenancy   # glibc tuned (the
        child inherits the environment): multi-MiB buffers go back to the system when freed
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from sqlalchemy import update

from bench.submit import percentile
from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd.config import Config, SlurmConfig
from clusterd.model.spec import JobSpec
from clusterd.server import ClusterDaemon
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.request import JobRequest
from clusterd.store.store import sqlite_store
from clusterd.store.tables import jobs

# Unix accounts every Debian host has (clusterd maps callers to Unix users); root is the admin.
USERS = ("daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp")
ADMIN = "root"
SCRIPT_BYTES = (1 << 20) - 128  # limits.max_script_bytes, less the header line
ENV_VARS, ENV_BYTES = 95, 32 << 10  # limits.max_env_value_bytes each; 95 keeps the request under 4 MiB


def token(user: str) -> str:
    return f"bench-token-{user}-0123456789"


def write_config(directory: Path) -> Config:
    tokens = directory / "tokens.toml"
    tokens.write_text(
        "".join(
            f'[[token]]\nuser = "{u}"\ntoken = "{token(u)}"\nadmin = {str(u == ADMIN).lower()}\n\n'
            for u in (*USERS, ADMIN)
        )
    )
    os.chmod(tokens, 0o600)
    return Config(
        listen="127.0.0.1:0",
        allow_insecure=True,
        state_dir=str(directory / "state"),  # loopback bench
        tokens_file=str(tokens),
        log_level="WARNING",
        slurm=SlurmConfig(default_partition="debug", job_root=str(directory / "jobs")),
    )


class LeanFakeSlurm(FakeSlurm):
    """FakeSlurm keeps every submitted script for tests to inspect; here that would be Slurm's memory
    (~4 MB per job) counted as clusterd's, so the copy is dropped once the job is "in Slurm"."""

    async def submit(self, request: JobRequest) -> str:
        job_id = await super().submit(request)
        self.submitted.clear()
        return job_id


async def serve(directory: Path) -> None:
    """The child: a clusterd over FakeSlurm until SIGTERM; its port goes to ``directory/port``."""
    daemon = ClusterDaemon(write_config(directory), backend=LeanFakeSlurm.cluster())
    task = asyncio.create_task(daemon.run())
    while daemon.port == 0:
        await asyncio.sleep(0.05)
    (directory / "port").write_text(str(daemon.port))
    await task


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def big_spec(user: str, i: int, script: str, env: dict[str, str]) -> jobs_pb2.JobSpec:
    return jobs_pb2.JobSpec(name=f"big-{user}-{i}", request_id=f"{user}-{i}", script=script, environment=env)


def load(addr: str, user: str, count: int) -> None:
    filler = "".join(f"# {secrets.token_hex(60)}\n" for _ in range(SCRIPT_BYTES // 123))
    script = ("#!/bin/sh\n" + filler)[:SCRIPT_BYTES]
    env = {f"V{k}": secrets.token_hex(ENV_BYTES // 2) for k in range(ENV_VARS)}
    md = (("authorization", f"Bearer {token(user)}"),)
    opts = [("grpc.max_send_message_length", 8 << 20)]
    with grpc.insecure_channel(addr, options=opts) as ch:
        stub = jobs_pb2_grpc.JobServiceStub(ch)
        for i in range(count):
            stub.SubmitJob(jobs_pb2.SubmitJobRequest(spec=big_spec(user, i, script, env)), metadata=md, timeout=120)


def list_times(addr: str, user: str, calls: int, who: str = "") -> tuple[list[float], int]:
    md = (("authorization", f"Bearer {token(user)}"),)
    with grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 64 << 20)]) as ch:
        stub = jobs_pb2_grpc.JobServiceStub(ch)
        stub.ListJobs(jobs_pb2.ListJobsRequest(user=who), metadata=md)  # connect + warm
        out, n = [], 0
        for _ in range(calls):
            t = time.perf_counter()
            n = len(stub.ListJobs(jobs_pb2.ListJobsRequest(user=who), metadata=md, timeout=60).jobs)
            out.append((time.perf_counter() - t) * 1000)
    return out, n


def ms(values: list[float]) -> str:
    return f"p50 {percentile(values, 50):7.1f} ms  p95 {percentile(values, 95):7.1f} ms"


async def save_ms(directory: Path, synchronous: str, saves: int) -> float:
    """Mean time of one record save (one transaction) under ``synchronous``."""
    store = sqlite_store(directory / f"sync-{synchronous}.sqlite3")
    await store.open()
    try:
        rec, _ = await store.jobs.reserve("u", "", JobSpec(command=("true",)))
        durable = synchronous == "FULL"
        started = time.perf_counter()
        for i in range(saves):
            stmt = update(jobs).where(jobs.c.record_id == rec.record_id).values(updated=float(i))
            await store.db.write(lambda conn, stmt=stmt: conn.execute(stmt), durable=durable)  # type: ignore[misc]
        return (time.perf_counter() - started) * 1000 / saves
    finally:
        await store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--per-user", type=int, default=200)
    ap.add_argument("--lists", type=int, default=30, help="ListJobs calls per user")
    ap.add_argument("--saves", type=int, default=300, help="record saves per synchronous mode")
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        return
    users = USERS[: args.users]
    with tempfile.TemporaryDirectory(prefix="tenancy-bench-") as tmp:
        directory = Path(tmp)
        child = subprocess.Popen([sys.executable, "-m", "bench.tenancy", "--serve", str(directory)])
        try:
            while not (directory / "port").exists():
                assert child.poll() is None, "clusterd exited"
                time.sleep(0.1)
            addr = f"127.0.0.1:{(directory / 'port').read_text()}"
            rss_start = status_kib(child.pid, "VmRSS")
            empty, _ = list_times(addr, users[0], args.lists)
            started = time.perf_counter()
            threads = [threading.Thread(target=load, args=(addr, u, args.per_user)) for u in users]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            loaded_s = time.perf_counter() - started
            time.sleep(5)  # a couple of polls settle the new records
            rss_loaded = status_kib(child.pid, "VmRSS")
            own: list[float] = []
            for u in users:
                times, n = list_times(addr, u, args.lists)
                assert n == args.per_user, (u, n)
                own += times
            everyone, n_all = list_times(addr, ADMIN, max(5, args.lists // 3), who="*")
            rss_end, peak = status_kib(child.pid, "VmRSS"), status_kib(child.pid, "VmHWM")
            db = sum(p.stat().st_size for p in (directory / "state").glob("clusterd.sqlite3*"))
        finally:
            child.terminate()
            child.wait(30)
        spec_mib = (SCRIPT_BYTES + ENV_VARS * ENV_BYTES) / 2**20
        print(
            f"\ntenancy: {len(users)} users x {args.per_user} specs of {spec_mib:.2f} MiB = "
            f"{len(users) * args.per_user} records, loaded in {loaded_s:.0f} s; database {db / 2**30:.2f} GiB"
        )
        print(
            f"clusterd RSS MB: start {rss_start / 1024:.0f}, loaded {rss_loaded / 1024:.0f}, "
            f"after lists {rss_end / 1024:.0f}, peak {peak / 1024:.0f}   (target < 300)"
        )
        print(f"ListJobs own ({args.per_user} rows)    {ms(own)}   (target p50 < 100 ms)")
        print(f"ListJobs admin '*' ({n_all} rows) {ms(everyone)}")
        print(
            f"ListJobs anchor, empty store  {ms(empty)}   own/anchor p50 "
            f"{percentile(own, 50) / percentile(empty, 50):.1f}x"
        )
        full, normal = (asyncio.run(save_ms(directory, mode, args.saves)) for mode in ("FULL", "NORMAL"))
        print(f"record save: synchronous=FULL {full:.2f} ms, NORMAL {normal:.2f} ms ({full / normal:.1f}x)")


if __name__ == "__main__":
    main()
