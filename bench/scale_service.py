"""One clusterd on the stack as it is up, measured as a process: what bench/scale.py compares by size.

A clusterd of the bench's own (``bench.recovery.Clusterd``: the stack's clusterd.toml, slurmrestd,
a poll a second, no per-user rate limit or job quota, Slurm calls' timeout 120 s) follows two
running jobs of alice's; the stack's own clusterd is stopped (SIGSTOP) meanwhile, so that every
job-info RPC and every slurmrestd cycle is this one's. Figures:

- idle: CPU seconds per second of clusterd (with the commands it ran) and of slurmrestd and
  slurmctld, slurmctld's RPCs per second (every type but sdiag's own and slurmd's), clusterd's RSS;
- a storm: ``clients`` threads submitting held jobs for ``storm`` seconds, the same figures and
  the submit rate, RSS at its highest (sampled);
- ``watch`` latency: an external ``scancel`` of a running job to its first event on a WatchJobs stream;
- recovery: node death (``stack.sh kill-node``) to the first training step of a 2-node job
  (``bench.recovery.one_recovery``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.recovery import Clusterd, one_recovery
from bench.submit import TINY_JOB, cancel_by_name, pid_file, process_cpu, sdiag
from clusterctl.client import ClusterClient
from clusterctl.errors import ServiceError
from clusterctl.v1 import jobs_pb2
from tests.support.stack import Stack
from tests.support.wait import wait_for

# RPCs slurmd and the jobs' steps send, and sdiag's own: not the service's.
_NOT_CLUSTERD = ("MESSAGE_", "REQUEST_COMPLETE_", "REQUEST_STEP_COMPLETE", "REQUEST_STATS_INFO")


# The storm measures the submit path, not the per-user rate limit and job quota that would refuse it.
# A whole read of a 10,000-job queue took over 30 s (the default timeout) on the loaded 2-core host.
_UNLIMITED = {
    "CLUSTERD_LIMITS__REQUESTS_PER_SECOND": "0",
    "CLUSTERD_LIMITS__MAX_JOBS_PER_USER": "0",
    "CLUSTERD_SLURM__COMMAND_TIMEOUT_SECONDS": "120",
}


@dataclass
class Window:
    """One stretch of the run: CPU s/s per process, slurmctld RPCs/s, clusterd's RSS (MB)."""

    seconds: float
    clusterd: float
    slurmrestd: float
    slurmctld: float
    rpcs: float
    rss_mb: float
    rpc_types: dict[str, int] = field(default_factory=dict)


@dataclass
class ServiceFigures:
    idle: Window
    storm: Window
    submits_per_s: float
    watch_latency_s: list[float]
    recovery_first_step_s: list[float]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def stack_clusterd(stack: Stack) -> list[int]:
    """The stack's own clusterd processes (``clusterd serve --config <stack>/clusterd.toml``, no --listen)."""
    config = str(stack.dir / "clusterd.toml")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if "serve" in argv and config in argv and "--listen" not in argv and any("clusterd" in a for a in argv):
                pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def stack_clusterd_stopped(stack: Stack) -> Iterator[None]:
    """SIGSTOP the stack's own clusterd for the block (SIGCONT after, whatever happens)."""
    pids = stack_clusterd(stack)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _rpcs(env: dict[str, str]) -> dict[str, int]:
    return {k: v for k, v in sdiag(env).counts.items() if not k.startswith(_NOT_CLUSTERD)}


def measure(stack: Stack, pid: int, seconds: float, during: threading.Thread | None = None) -> Window:
    """CPU, RPCs and RSS over ``seconds`` (or until ``during``, started here, ends); RSS at its highest."""
    env = stack.slurm_env()
    ctld, restd = pid_file(stack.dir / "run/slurmctld.pid"), pid_file(stack.dir / "run/slurmrestd.pid")

    def cpu(p: int | None) -> float:
        return (process_cpu(p) or 0.0) if p else 0.0

    rpc0, c0, r0, k0 = _rpcs(env), cpu(pid), cpu(restd), cpu(ctld)
    started = time.monotonic()
    peak = rss_mb(pid)
    if during is not None:
        during.start()
    while during.is_alive() if during is not None else time.monotonic() - started < seconds:
        time.sleep(0.5)
        peak = max(peak, rss_mb(pid))
    elapsed = time.monotonic() - started
    rpc1 = _rpcs(env)
    types = {k: rpc1[k] - rpc0.get(k, 0) for k in rpc1 if rpc1[k] != rpc0.get(k, 0)}
    return Window(
        elapsed,
        (cpu(pid) - c0) / elapsed,
        (cpu(restd) - r0) / elapsed,
        (cpu(ctld) - k0) / elapsed,
        sum(types.values()) / elapsed,
        peak if during is not None else rss_mb(pid),
        types,
    )


def follow(client: ClusterClient, name: str, count: int) -> list[str]:
    """``count`` one-node ``sleep`` jobs of alice's through clusterd, running: the jobs it follows."""
    spec = jobs_pb2.JobSpec(name=name, command=["sleep", "3600"], nodes=1)
    ids = [client.submit(spec).job.job_id for _ in range(count)]
    running = {jobs_pb2.JOB_STATE_RUNNING}
    wait_for(lambda: all(client.get(j).state in running for j in ids), 120, what=f"jobs {ids} running")
    return ids


def watch_latency(stack: Stack, ours: Clusterd, name: str, repeats: int) -> list[float]:
    """Seconds from an external ``scancel`` of a running job to its first WatchJobs event after it
    (COMPLETING or CANCELLED: Slurm marks the job at once, so this is clusterd's part)."""
    seen: dict[str, float] = {}
    stream = ClusterClient(ours.daemon.addr, stack.env["CLUSTERCTL_TOKEN"])

    def watch() -> None:
        with contextlib.suppress(Exception):  # closing the client ends the stream
            for event in stream.watch(include_initial=False):
                if event.job.state not in (jobs_pb2.JOB_STATE_PENDING, jobs_pb2.JOB_STATE_RUNNING):
                    seen.setdefault(event.job.job_id, time.monotonic())

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    out = []
    try:
        for _ in range(repeats):
            (job_id,) = follow(ours.client, name, 1)
            time.sleep(1.5)  # off the poll's phase of the start
            t0 = time.monotonic()
            stack.run("scancel", job_id)
            out.append(wait_for(_seen_at(seen, job_id), 30, interval=0.01, what=f"{job_id} watched") - t0)
    finally:
        stream.close()
        thread.join(10)
    return out


def _seen_at(seen: dict[str, float], job_id: str) -> Callable[[], float]:
    return lambda: seen.get(job_id, 0.0)


def storm(stack: Stack, ours: Clusterd, name: str, clients: int, seconds: float) -> tuple[Window, float]:
    """``clients`` threads submitting held tiny jobs for ``seconds``: the window and submits per second."""
    done, refused = [0] * clients, [0] * clients

    def client_loop(i: int, until: float) -> None:
        with ClusterClient(ours.daemon.addr, stack.env["CLUSTERCTL_TOKEN"]) as client:
            while time.monotonic() < until:
                try:  # a fresh spec each time: submit() gives it a request_id, and a retry is one job
                    client.submit(jobs_pb2.JobSpec(name=name, script=TINY_JOB, hold=True))
                    done[i] += 1
                except ServiceError:  # a rate limit or quota: counted, not fatal
                    refused[i] += 1

    def all_clients() -> None:
        until = time.monotonic() + seconds
        threads = [threading.Thread(target=client_loop, args=(i, until)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    assert ours.daemon.proc is not None
    window = measure(stack, ours.daemon.proc.pid, seconds, during=threading.Thread(target=all_clients))
    if sum(refused):
        print(f"  storm: {sum(refused)} submits refused", flush=True)
    return window, sum(done) / window.seconds


def run_service(
    stack: Stack, *, idle: float, clients: int, seconds: float, watches: int, recoveries: int
) -> ServiceFigures:
    """Every figure of the module doc on the stack as it is up (the stack's own clusterd paused)."""
    name = f"ccscale-svc-{os.getpid()}"
    env = stack.slurm_env()
    with stack_clusterd_stopped(stack):
        ours = Clusterd(stack, _UNLIMITED)
        try:
            assert ours.daemon.proc is not None
            pid = ours.daemon.proc.pid
            follow(ours.client, name, 2)
            time.sleep(5.0)  # the submits' polls and adoption settle
            quiet = measure(stack, pid, idle)
            print(f"  idle: {quiet}", flush=True)
            latencies = watch_latency(stack, ours, f"{name}-w", watches)
            print(f"  watch latency: {[round(x, 3) for x in latencies]}", flush=True)
            firsts = []
            for _ in range(recoveries):  # before the storm: its thousand jobs' ends are no part of these
                result = one_recovery("node kill", stack, ours)
                print(f"  node kill: {result}", flush=True)
                firsts.append(float(result["first_step"]))
            loud, rate = storm(stack, ours, f"{name}-s", clients, seconds)
            print(f"  storm: {loud}, {rate:.1f} submits/s", flush=True)
        finally:
            ours.close()
            for suffix in ("", "-w", "-s"):
                cancel_by_name(f"{name}{suffix}", env)
    return ServiceFigures(quiet, loud, rate, latencies, firsts)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
