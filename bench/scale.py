"""The queue view's cost on a big cluster: a partial poll against the whole-queue read it replaces.

On the stack as it is up (``stack.sh up --nodes 256`` for the big case), ``--jobs`` held jobs of
another user fill the queue (as a busy cluster's pending work); two running jobs of alice's are
what the service follows. Each round runs, through the commands backend as clusterd does, one
whole read (``list_jobs``: what every poll cost before, and every ``_WHOLE_EVERY_SECONDS`` now)
and one partial poll (``poll_jobs`` of the two followed ids). Per kind: wall seconds, clusterd's
own CPU seconds (parsing), the Slurm commands' CPU seconds (squeue rendering JSON), and
slurmctld's job-info RPCs (sdiag). The anchor is the whole read of the same moment.

Then ``--window`` seconds of idle polling (one poll a second, the queue unchanged) through the
queue cache as clusterd runs it, per backend, with partial polls and with whole reads every poll
(what clusterd did before): CPU seconds per second of the cache (clusterd's share: parsing, and the
squeue it runs) and of slurmctld and slurmrestd, and slurmctld's job-info RPCs per second.

The stack's own clusterd polls meanwhile: the slurmrestd figures and the RPCs include it.
Not measured here (yet): clusterd's RSS as a process, a submit storm, watch latency, recovery time
at 256 nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from bench.submit import cancel_by_name, pid_file, process_cpu, sdiag, slurm_env, wait_for_slurm
from clusterd.config import SlurmConfig
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.commands import CommandsBackend
from clusterd.supervisor.cache import QueueCache
from tests.support.backends import close_backend, make_backend
from tests.support.stack import Stack, load_stack


def submit_held(env: dict[str, str], name: str, user: str, count: int) -> None:
    """``count`` held one-task jobs of ``user`` (sbatch 8 at a time)."""
    argv = ["runuser", "-u", user, "--", "sbatch", "--hold", f"--job-name={name}", "-o", "/dev/null", "--wrap=true"]

    def one(_: int) -> None:
        subprocess.run(argv, env=env, cwd="/tmp", capture_output=True, check=True, timeout=60)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count)))


def submit_running(env: dict[str, str], name: str, user: str) -> str:
    argv = ["runuser", "-u", user, "--", "sbatch", "--parsable", f"--job-name={name}", "-o", "/dev/null"]
    out = subprocess.run([*argv, "--wrap=sleep 3600"], env=env, cwd="/tmp", capture_output=True, text=True, check=True)
    return out.stdout.strip().split(";")[0]


async def measure(call: Callable[[], Awaitable[object]], env: dict[str, str]) -> tuple[float, float, float, int]:
    """(wall s, own CPU s, children's CPU s, slurmctld REQUEST_JOB_INFO RPCs) of one call."""
    rpc0 = sdiag(env).counts.get("REQUEST_JOB_INFO", 0)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await call()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    kids = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    rpcs = sdiag(env).counts.get("REQUEST_JOB_INFO", 0) - rpc0
    return wall, cpu, kids, rpcs


def _cpu(pid: int | None) -> float:
    return (process_cpu(pid) or 0.0) if pid else 0.0


async def idle(
    backend: SlurmBackend, focus: frozenset[str] | None, stack: Stack, env: dict[str, str], window: float
) -> tuple[float, float, float, float]:
    """CPU s/s of the cache (own + children), slurmctld, slurmrestd; slurmctld job-info RPCs/s."""
    cache = QueueCache(backend, interval=1.0)
    if focus is not None:
        followed = focus

        async def focused() -> frozenset[str]:
            return followed

        cache.focus_on(focused)
    await cache.poll_once()  # the first look is whole either way
    ctld, restd = pid_file(stack.dir / "run/slurmctld.pid"), pid_file(stack.dir / "run/slurmrestd.pid")
    rpc0, c0, r0 = sdiag(env).counts.get("REQUEST_JOB_INFO", 0), _cpu(ctld), _cpu(restd)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    own0, started = time.process_time(), time.monotonic()
    while time.monotonic() - started < window:
        tick = time.monotonic()
        await cache.poll_once()
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    elapsed = time.monotonic() - started
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    kids = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    mine = (time.process_time() - own0 + kids) / elapsed
    rpcs = (sdiag(env).counts.get("REQUEST_JOB_INFO", 0) - rpc0) / elapsed
    return mine, (_cpu(ctld) - c0) / elapsed, (_cpu(restd) - r0) / elapsed, rpcs


async def run(args: argparse.Namespace) -> None:
    stack = load_stack()
    env = slurm_env(stack)
    wait_for_slurm(env)
    nodes = subprocess.run(["sinfo", "-h", "-o", "%D", "-p", "debug"], env=env, capture_output=True, text=True)
    name = f"ccscale-{os.getpid()}"
    backend = CommandsBackend(SlurmConfig(slurm_conf=env["SLURM_CONF"], bin_dir=stack.slurm_bin))
    try:
        started = time.monotonic()
        submit_held(env, name, "bob", args.jobs)
        print(f"{args.jobs} held jobs of bob's queued in {time.monotonic() - started:.0f} s", flush=True)
        followed = frozenset(submit_running(env, name, "alice") for _ in range(2))
        kinds: dict[str, Callable[[], Awaitable[object]]] = {
            "whole read (anchor)": backend.list_jobs,
            "partial poll": lambda: backend.poll_jobs(followed),
        }
        results: dict[str, list[tuple[float, float, float, int]]] = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for kind, call in kinds.items():
                results[kind].append(await measure(call, env))
        sizes = {len(await backend.list_jobs()), len((await backend.poll_jobs(followed)).jobs)}
        idles: dict[str, tuple[float, float, float, float]] = {}
        for kind in ("commands", "slurmrestd"):
            b = make_backend(kind, stack)
            try:
                for mode, focus in (("whole every poll", None), ("partial", followed)):
                    idles[f"{kind}, {mode}"] = await idle(b, focus, stack, env, args.window)
            finally:
                await close_backend(b)
    finally:
        cancel_by_name(name, env)
    print(f"\nscale bench: {nodes.stdout.strip()} nodes, Slurm {stack.slurm_version}, {args.jobs} held jobs")
    print(f"jobs listed: whole / partial = {max(sizes)} / {min(sizes)}; medians of {args.rounds} rounds")
    print(f"{'':22s}{'wall s':>9s}{'clusterd CPU s':>16s}{'squeue CPU s':>14s}{'job RPCs':>10s}{'wall vs anchor':>16s}")
    anchor = statistics.median(r[0] for r in results["whole read (anchor)"])
    for kind, rows in results.items():
        wall, cpu, kids = (statistics.median(r[i] for r in rows) for i in range(3))
        rpcs = statistics.median(r[3] for r in rows)
        print(f"{kind:22s}{wall:9.3f}{cpu:16.3f}{kids:14.3f}{rpcs:10.0f}{wall / anchor:15.3f}x")
    print(f"\nidle, {args.window:g} s at one poll a second: CPU s per s, job-info RPCs per s")
    print(f"{'':30s}{'cache':>8s}{'slurmctld':>11s}{'slurmrestd':>12s}{'RPCs/s':>8s}{'cache vs whole':>16s}")
    for label, (mine, ctld, restd, rpcs) in idles.items():
        base = idles[label.split(",")[0] + ", whole every poll"][0]
        print(f"{label:30s}{mine:8.3f}{ctld:11.3f}{restd:12.3f}{rpcs:8.2f}{mine / base:15.3f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=10_000, help="held jobs of another user (default 10,000)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of one whole read + one partial poll")
    p.add_argument("--window", type=float, default=15.0, help="seconds of idle polling per backend and mode")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root with the local stack up")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
