"""Failover benchmark: what the death of clusterd's leader costs, with two replicas on PostgreSQL.

Two clusterd replicas (tests.support.replicas) share a throwaway PostgreSQL (tests.support.postgres)
in front of the local stack's Slurm. Each repeat:

1. a one-node job (``sleep``) runs with a requeue-on-failure policy;
2. the leader is frozen (SIGSTOP: from now on it acts no more; t0), the job's process is killed,
   so the job fails and needs a requeue decision, and the frozen leader is then SIGKILLed;
3. a client that last spoke to the dead leader submits again at once (its request fails over);
4. measured: t0 -> the first accepted submit, and t0 -> the new leader's requeue decision (the
   job's restart record, "detected" phase); the killed replica is restarted as a follower.

Anchor: Slurm's own backup controller takes over after SlurmctldTimeout, 120 s by default (not
measured here: the local stack runs one slurmctld; the row says so).

Then submit throughput with 16 clients for ``--seconds`` through one replica, and through two
(clients spread over both), same store, same stack, held jobs (no node time): the ratio 2 vs 1.

Run as root with the stack up: ``python -m bench.failover`` (about 3 min with the defaults).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from google.protobuf.duration_pb2 import Duration

from clusterctl.client import ClusterClient
from clusterctl.v1 import jobs_pb2
from tests.support.postgres import SKIP_REASON, get_cluster
from tests.support.replicas import LEASE_SECONDS, Replicas
from tests.support.stack import Stack
from tests.support.wait import wait_for

SLURM_BACKUP_TAKEOVER = 120.0  # SlurmctldTimeout's default (slurm.conf(5)): Slurm's backup controller


def _sleep_spec(tag: str) -> jobs_pb2.JobSpec:
    # Its `sleep` killed, the job exits 3: a retryable failure, so the supervisor decides a requeue.
    policy = jobs_pb2.RestartPolicy(max_restarts=3, backoff=Duration(seconds=0), retryable_exit_codes=[3])
    return jobs_pb2.JobSpec(name=tag, command=["bash", "-c", "sleep 3007; exit 3"], restart_policy=policy)


def _kill_job_process(stack: Stack, node: str) -> None:
    """SIGKILL the job's ``sleep 3007`` in ``node``'s namespace: the job exits 3, its node stays fine."""
    ns = stack.netns(node)
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=True).stdout.split()
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", b"3007"]:
            os.kill(int(pid), signal.SIGKILL)


def one_failover(stack: Stack, group: Replicas) -> dict[str, float]:
    client = group.client("alice")
    tag = f"fo-{uuid.uuid4().hex[:6]}"
    job = client.submit(_sleep_spec(tag)).job
    running = wait_for(
        lambda: (j := client.get(job.job_id)).state == jobs_pb2.JOB_STATE_RUNNING and j,
        timeout=60,
        what="the job running",
    )
    leader = group.leader()
    # A client whose channel is the leader's: its next call meets the dead replica first.
    first = ClusterClient(
        ",".join([leader.addr, *(d.addr for d in group.daemons if d is not leader)]), stack.tokens["alice"]
    )
    first.get(job.job_id)
    t0 = group.kill(leader, signal.SIGSTOP)
    _kill_job_process(stack, running.nodes[0])
    group.kill(leader, signal.SIGKILL)
    first.submit(jobs_pb2.JobSpec(name=f"{tag}-probe", command=["true"], hold=True, request_id=uuid.uuid4().hex))
    submitted = time.time() - t0
    done = wait_for(
        lambda: (j := client.get(job.job_id)).restarts and j, timeout=60, interval=0.1, what="the requeue decision"
    )
    restart = done.restarts[0]
    decided = (restart.detected_at if restart.HasField("detected_at") else restart.time).ToNanoseconds() / 1e9 - t0
    leader.start()
    client.cancel(job.job_id)
    subprocess.run(["scancel", "-u", "alice", "--name", f"{tag}-probe"], env=stack.slurm_env(), check=False)
    first.close()
    client.close()
    return {"submit": submitted, "requeue decision": decided}


def throughput(stack: Stack, addrs: list[str], seconds: float, clients: int = 16) -> float:
    """Accepted submits per second, ``clients`` threads spread over ``addrs`` (each lists all, its own first)."""
    tag = f"tp-{uuid.uuid4().hex[:6]}"
    stop = threading.Event()
    counts = [0] * clients

    def run(i: int) -> None:
        mine = addrs[i % len(addrs)]
        with ClusterClient(",".join([mine, *(a for a in addrs if a != mine)]), stack.tokens["alice"]) as c:
            while not stop.is_set():
                c.submit(jobs_pb2.JobSpec(name=tag, command=["true"], hold=True, request_id=uuid.uuid4().hex))
                counts[i] += 1

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(30)
    subprocess.run(["scancel", "-u", "alice", "--name", tag], env=stack.slurm_env(), check=False)
    return sum(counts) / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="leader deaths (medians)")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each throughput run")
    args = parser.parse_args()
    stack = Stack.load()
    base = Path(tempfile.mkdtemp(prefix="ccbench-failover-"))
    cluster = get_cluster()
    if cluster is None:
        raise SystemExit(SKIP_REASON)
    group = Replicas(stack, base, cluster.new_database())
    group.start()
    try:
        results = []
        for _ in range(args.repeats):
            results.append(one_failover(stack, group))
            print("  " + ", ".join(f"{k} {v:.2f} s" for k, v in results[-1].items()), flush=True)
        two = throughput(stack, [d.addr for d in group.daemons], args.seconds)
        group.daemons[1].stop()
        one = throughput(stack, [group.daemons[0].addr], args.seconds)
    finally:
        group.stop()
    subprocess.run(["rm", "-rf", str(base)], check=False)
    print(
        f"\nfailover bench: 2 replicas, PostgreSQL store, lease {LEASE_SECONDS:g} s; seconds after the "
        f"leader stopped (SIGSTOP, then SIGKILL), medians of {args.repeats}"
    )
    for key in ("submit", "requeue decision"):
        values = [r[key] for r in results]
        print(
            f"  leader death -> first {'accepted submit' if key == 'submit' else 'requeue decision':24}"
            f"{statistics.median(values):6.2f} s  (min {min(values):.2f}, max {max(values):.2f})"
        )
    decision = statistics.median(r["requeue decision"] for r in results)
    print(
        f"  Slurm's backup controller: takes over after SlurmctldTimeout = {SLURM_BACKUP_TAKEOVER:.0f} s by default "
        f"(anchor not measured: the local stack runs one slurmctld) -> {SLURM_BACKUP_TAKEOVER / decision:.0f}x"
    )
    print(
        f"  submit throughput, 16 clients, {args.seconds:g} s, held jobs: 2 replicas {two:.1f}/s, "
        f"1 replica {one:.1f}/s = {two / one:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
