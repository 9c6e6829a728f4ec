"""Queue-poll latency while a job's checkpoint prefix is hostile, against an empty prefix.

One running ``sleep`` job at a time carries a checkpoint URI on local disk: first an empty
prefix (the baseline), then one whose ``commits/`` holds 100,000 objects, then one whose
``commits/`` is a 10,000-deep directory tree. For each, after the job runs and the progress
reader follows it, ``--window`` seconds of clusterd's own ``clusterd_queue_poll_latency_seconds``
histogram (sum and count deltas from /metrics) give the mean poll time; the result is each hostile
case's ratio to the empty one (target: within 1.2x). The cases are interleaved over ``--rounds``
rounds and each case's median is compared, because the stack's Slurm is shared and its squeue time
drifts with whatever else runs. The reader is set to re-read the hostile
prefixes every ``--reread`` seconds (default 1; the shipped retry is 300 s), so the window sees it
at work, not idle. A build where polls stop (the poller crashed) reports no polls.

Uses the local stack (deploy/local/stack.sh up), root, its own clusterd (free ports, temp state
dir, own tokens); every job is named ``ccpoll-<pid>`` and cancelled by name at the end.
"""

from __future__ import annotations

import argparse
import os
import pwd
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.submit import bench_daemon, cancel_by_name, running, slurm_env, wait_for_slurm, write_config
from clusterctl.client import ClusterClient
from clusterctl.v1 import jobs_pb2
from tests.support.ports import free_port
from tests.support.prefixes import deep_tree, many_markers

_METRIC = "clusterd_queue_poll_latency_seconds"


def poll_totals(port: int) -> tuple[float, float]:
    """(seconds spent polling, polls) so far, from clusterd's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == f"{_METRIC}_sum":
                total = s.value
            elif s.name == f"{_METRIC}_count":
                count = s.value
    return total, count


def empty_prefix(root: Path) -> None:
    (root / "commits").mkdir(parents=True)


def many_objects(root: Path) -> None:
    many_markers(root / "commits", 100_000)


def hostile_tree(root: Path) -> None:
    deep_tree(root / "commits", 10_000)


CASES = (
    ("empty prefix", "empty", empty_prefix),
    ("100,000 objects", "huge", many_objects),
    ("10,000-deep tree", "deep", hostile_tree),
)


def measure(
    client: ClusterClient, metrics_port: int, name: str, uri: str, window: float, settle: float
) -> float | None:
    """Mean poll seconds over ``window`` while a job checkpointing to ``uri`` runs; None: no poll finished."""
    spec = jobs_pb2.JobSpec(name=name, command=["sleep", str(int(window + settle + 120))], checkpoint_uri=uri)
    job_id = client.submit(spec).job.job_id
    try:
        deadline = time.monotonic() + 180
        while client.get(job_id).state != jobs_pb2.JOB_STATE_RUNNING:
            if time.monotonic() > deadline:
                print(f"  job {job_id} not running after 180 s (queue full, or the poller stopped)")
                return None
            time.sleep(0.5)
        time.sleep(settle)  # followed by the progress reader, its first reads done
        total0, count0 = poll_totals(metrics_port)
        time.sleep(window)
        total1, count1 = poll_totals(metrics_port)
    finally:
        client.cancel(job_id)
    polls = count1 - count0
    return (total1 - total0) / polls if polls else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--window", type=float, default=20.0, help="seconds measured per case and round (default 20)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the cases (default 3)")
    p.add_argument("--poll-interval", type=float, default=1.0, help="clusterd's poll interval (default 1)")
    p.add_argument("--reread", type=float, default=1.0, help="progress re-read/retry seconds (default 1)")
    p.add_argument("--user", default="alice")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root with the local stack up")
    env = slurm_env()
    name = f"ccpoll-{os.getpid()}"
    tmp = Path(tempfile.mkdtemp(prefix="ccpoll-"))
    tmp.chmod(0o755)  # the job root is under it: the user's jobs write their output there
    pwd.getpwnam(args.user)
    config, token = write_config(tmp, env["SLURM_CONF"], args.user)
    metrics_port = free_port()
    wait_for_slurm(env)
    service_env = {
        **env,
        "CLUSTERD_SUPERVISOR__PROGRESS_INTERVAL_SECONDS": str(args.reread),
        "CLUSTERD_SUPERVISOR__PROGRESS_RETRY_SECONDS": str(args.reread),
    }
    results: dict[str, list[float]] = {label: [] for label, _, _ in CASES}
    try:
        for _, directory, make in CASES:
            make(tmp / directory)
        with running(bench_daemon(service_env, config, tmp / "state", args.poll_interval, metrics_port)) as d:
            client = ClusterClient(d.addr, token)
            for r in range(args.rounds):
                for label, directory, _ in CASES:
                    mean = measure(client, metrics_port, name, f"file://{tmp / directory}", args.window, 3.0)
                    shown = "no poll finished" if mean is None else f"{mean * 1000:.1f} ms"
                    print(f"  round {r + 1}: {label:18s} mean poll {shown}", flush=True)
                    if mean is not None:
                        results[label].append(mean)
    finally:
        cancel_by_name(name, env)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)  # rm copes with the deep tree
    medians = {label: statistics.median(v) if v else None for label, v in results.items()}
    base = medians[CASES[0][0]]
    print(
        f"\npoll latency (median of {args.rounds} rounds of {args.window:g} s), poll interval "
        f"{args.poll_interval:g} s, progress re-read every {args.reread:g} s:"
    )
    for label, median in medians.items():
        if median is None or not base:
            print(f"  {label:18s} {'no poll finished':>16s}")
            continue
        spread = ", ".join(f"{v * 1000:.1f}" for v in results[label])
        print(f"  {label:18s} {median * 1000:8.1f} ms  {median / base:.2f}x  (rounds: {spread} ms)")


if __name__ == "__main__":
    main()
