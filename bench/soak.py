"""clusterd's memory under steady load: does its RSS level off, or keep growing?

16 clients (threads, each its own ClusterClient, all as one user) loop for ``--minutes``: submit a
tiny ``command=["true"]`` job, get it, list the user's jobs, and cancel it, so that the queue stays
short and what grows is the service, not the work it tracks; 4 WatchJobs streams stay open. Every
``--sample`` seconds the service's own /metrics is scraped: ``process_resident_memory_bytes`` and
``clusterd_rpcs_total``. The result is the RSS curve and its range
in each half of the run: a leak shows as a second half that sits wholly above the first; a plateau
as the same range. The anchor is the process itself earlier in the run (no outside tool does this).

Uses the local stack (deploy/local/stack.sh up), root, its own clusterd (free ports, temp state
dir, own tokens); every job is named ``ccsoak-<pid>`` and cancelled by name at the end.
"""

from __future__ import annotations

import argparse
import os
import pwd
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.submit import bench_daemon, cancel_by_name, running, slurm_env, wait_for_slurm, write_config
from clusterctl.client import ClusterClient
from clusterctl.errors import ClusterctlError
from clusterctl.v1 import jobs_pb2
from tests.support.ports import free_port


def scrape(port: int) -> tuple[float, float]:
    """(RSS in MB, total RPCs served) from clusterd's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    rss = calls = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "process_resident_memory_bytes":
                rss = s.value / 2**20
            elif s.name == "clusterd_rpcs_total":
                calls += s.value
    return rss, calls


def summary(samples: list[tuple[float, float, float]], clients: int, errors: int) -> str:
    """The closing lines from (seconds, RSS MB, total calls) samples; the first one is the baseline."""
    duration = samples[-1][0]
    rate = (samples[-1][2] - samples[0][2]) / duration if duration else 0.0
    rest = samples[1:] or samples
    half = len(rest) // 2
    halves = [("first half", rest[:half] or rest), ("second half", rest[half:])]
    ranges = ", ".join(
        f"{name} {min(s[1] for s in part):.1f}-{max(s[1] for s in part):.1f} "
        f"(median {statistics.median(s[1] for s in part):.1f})"
        for name, part in halves
    )
    return (
        f"\nsoak: {clients} clients + 4 watchers for {duration:.0f} s, {rate:.0f} calls/s, {errors} client "
        f"errors\nRSS MB: at start {samples[0][1]:.1f}; {ranges}; end {samples[-1][1]:.1f}"
    )


def client_loop(addr: str, token: str, name: str, stop: threading.Event, errors: list[str]) -> None:
    client = ClusterClient(addr, token)
    while not stop.is_set():
        try:
            job = client.submit(jobs_pb2.JobSpec(name=name, command=["true"])).job
            client.get(job.job_id)
            client.list_jobs(limit=50)
            client.cancel(job.job_id)
        except ClusterctlError as exc:
            errors.append(str(exc))
            time.sleep(0.5)


def watch_loop(addr: str, token: str, stop: threading.Event) -> None:
    client = ClusterClient(addr, token)
    while not stop.is_set():
        try:
            for _ in client.watch(include_initial=False):
                if stop.is_set():
                    return
        except ClusterctlError:
            time.sleep(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=5.0, help="length of the load (default 5)")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    p.add_argument("--sample", type=float, default=15.0, help="seconds between /metrics scrapes (default 15)")
    p.add_argument("--user", default="alice")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root with the local stack up")
    env = slurm_env()
    name = f"ccsoak-{os.getpid()}"
    tmp = Path(tempfile.mkdtemp(prefix="ccsoak-"))
    tmp.chmod(0o755)  # the job root is under it: the user's jobs write their output there
    pwd.getpwnam(args.user)
    config, token = write_config(tmp, env["SLURM_CONF"], args.user)
    metrics_port = free_port()
    wait_for_slurm(env)
    samples: list[tuple[float, float, float]] = []
    errors: list[str] = []
    stop = threading.Event()
    try:
        # No per-user rate limit: all clients are one user, and the point is load, not refusals.
        service_env = {**env, "CLUSTERD_LIMITS__REQUESTS_PER_SECOND": "0"}
        with running(bench_daemon(service_env, config, tmp / "soak", 2.0, metrics_port)) as d:
            threads = [
                threading.Thread(target=client_loop, args=(d.addr, token, name, stop, errors), daemon=True)
                for _ in range(args.clients)
            ]
            threads += [threading.Thread(target=watch_loop, args=(d.addr, token, stop), daemon=True) for _ in range(4)]
            started = time.monotonic()
            samples.append((0.0, *scrape(metrics_port)))
            for t in threads:
                t.start()
            end = started + args.minutes * 60
            while time.monotonic() < end:
                time.sleep(min(args.sample, max(end - time.monotonic(), 0)))
                samples.append((time.monotonic() - started, *scrape(metrics_port)))
                print(
                    f"  {samples[-1][0]:6.0f} s  RSS {samples[-1][1]:6.1f} MB  {samples[-1][2]:8.0f} calls",
                    file=sys.stderr,
                )
            stop.set()
    finally:
        stop.set()
        cancel_by_name(name, env)
    print(summary(samples, args.clients, len(errors)))
    if errors:
        print(f"first client error: {errors[0]}")


if __name__ == "__main__":
    main()
