"""clusterd on a big cluster beside a small one: what its cost follows, and how fast it still recovers.

For each ``--sizes`` (default 6 and 256 nodes) the bench brings the stack up at that size
(``stack.sh up --nodes N``; ``--slurm VER`` for another release), fills the biggest size's queue
with ``--jobs`` held jobs of bob's (a busy cluster's pending work, none of it the service's), and
measures one clusterd as a process (bench/scale_service.py): CPU per second at idle and during a
``--clients`` submit storm, its RSS, slurmctld's RPCs per second, ``watch`` event latency, and node
death -> first step of a 2-node job. Goals: idle CPU within 2x of the smallest size's, recovery
within 1 s of it. The smallest size is the anchor, with an empty queue.

On the biggest size, before that, through the commands backend as clusterd calls it: one whole
queue read (``list_jobs``: what every poll cost before, and every ``_WHOLE_EVERY_SECONDS`` now)
vs one partial poll (``poll_jobs`` of two followed ids), medians of ``--rounds`` (0: skipped):
wall seconds, clusterd's own CPU seconds (parsing), the Slurm commands' CPU seconds, slurmctld's
job-info RPCs. Then ``--window`` seconds of idle polling (one poll a second) through the queue cache,
per backend, partial polls vs a whole read every poll (slurmrestd's asks ``update_time``: a small
answer while no job changed): CPU seconds per second of the cache (with the squeue it runs), of
slurmctld and slurmrestd, and job-info RPCs per second.

The last size's stack is left up.
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
from pathlib import Path

from bench.scale_service import ServiceFigures, median, run_service
from bench.submit import cancel_by_name, pid_file, process_cpu, sdiag, slurm_env, wait_for_slurm
from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.commands import CommandsBackend
from clusterd.slurm.request import JobRequest
from clusterd.supervisor.cache import QueueCache
from tests.support.backends import close_backend, make_backend
from tests.support.stack import Stack, stack_for


async def submit_held(stack: Stack, name: str, user: str, count: int) -> None:
    """``count`` held one-task jobs of ``user``'s through slurmrestd (8 at a time): no process per
    job, which on a loaded 2-core machine would take longer than the measurements."""
    backend = make_backend("slurmrestd", stack)
    gate = asyncio.Semaphore(8)
    script = "#!/bin/sh\ntrue\n"
    request = JobRequest(
        script, name, user, hold=True, stdout="/dev/null", working_directory="/tmp", submit_directory="/tmp"
    )

    async def one() -> None:
        async with gate:
            for attempt in range(3):  # slurmctld may stall for seconds while the host is loaded
                try:
                    await backend.submit(request)
                    return
                except SlurmError:
                    if attempt == 2:
                        raise
                    await asyncio.sleep(5)

    try:
        await asyncio.gather(*(one() for _ in range(count)))
    finally:
        await close_backend(backend)


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


async def polls(stack: Stack, env: dict[str, str], name: str, args: argparse.Namespace) -> None:
    """The whole-read vs partial-poll comparison (module doc, second paragraph), printed."""
    nodes = subprocess.run(["sinfo", "-h", "-o", "%D", "-p", "debug"], env=env, capture_output=True, text=True)
    config = SlurmConfig(slurm_conf=env["SLURM_CONF"], bin_dir=stack.slurm_bin, command_timeout_seconds=300)
    backend = CommandsBackend(config)
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
            for mode, focus in (("whole read a poll", None), ("partial", followed)):
                idles[f"{kind}, {mode}"] = await idle(b, focus, stack, env, args.window)
        finally:
            await close_backend(b)
    subprocess.run(["scancel", *followed], env=env, capture_output=True)
    print(f"\nqueue polls: {nodes.stdout.strip()} nodes, Slurm {stack.slurm_version}, {args.jobs} held jobs")
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
        base = idles[label.split(",")[0] + ", whole read a poll"][0]
        print(f"{label:30s}{mine:8.3f}{ctld:11.3f}{restd:12.3f}{rpcs:8.2f}{mine / base:15.3f}x", flush=True)


def wait_queue_purged(env: dict[str, str], timeout: float = 420.0) -> None:
    """Until slurmctld holds fewer than 100 jobs in any state: an earlier run's cancelled thousands
    stay listed for MinJobAge (300 s), across restarts, and would be the small stack's queue."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        out = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i"], env=env, capture_output=True, text=True)
        if len(out.stdout.split()) < 100:
            return
        time.sleep(10)
    print(f"  (queue not purged after {timeout:.0f} s; measuring anyway)", flush=True)


def stack_up(version: str | None, nodes: int) -> Stack:
    """``stack.sh up --nodes N`` (``--slurm VER``): the stack at this size, slurmd answering on every node."""
    release = ["--slurm", version] if version else []
    script = Path(__file__).resolve().parent.parent / "deploy" / "local" / "stack.sh"
    started = time.monotonic()
    subprocess.run(["bash", str(script), "up", *release, "--nodes", str(nodes)], check=True, capture_output=True)
    stack = stack_for(version)
    wait_for_slurm(slurm_env(stack))
    wait_queue_purged(slurm_env(stack))
    print(f"[{nodes} nodes: stack up in {time.monotonic() - started:.0f} s]", flush=True)
    return stack


async def run(args: argparse.Namespace) -> dict[int, ServiceFigures]:
    figures: dict[int, ServiceFigures] = {}
    for size in args.sizes:
        stack = stack_up(args.slurm, size)
        env = slurm_env(stack)
        name = f"ccscale-{os.getpid()}"
        try:
            if size == max(args.sizes) and args.jobs:
                started = time.monotonic()
                await submit_held(stack, name, "bob", args.jobs)
                print(f"{args.jobs} held jobs of bob's queued in {time.monotonic() - started:.0f} s", flush=True)
                if args.rounds:
                    await polls(stack, env, name, args)
            figures[size] = run_service(
                stack,
                idle=args.idle,
                clients=args.clients,
                seconds=args.storm,
                watches=args.watches,
                recoveries=args.recoveries,
            )
        finally:
            cancel_by_name(name, env)
    return figures


def report(figures: dict[int, ServiceFigures], args: argparse.Namespace) -> str:
    """The side-by-side table: each size's figures and its ratio to the smallest size's."""
    small, big = min(figures), max(figures)
    rows: list[tuple[str, Callable[[ServiceFigures], float]]] = [
        ("idle: clusterd CPU s/s", lambda f: f.idle.clusterd),
        ("idle: slurmrestd CPU s/s", lambda f: f.idle.slurmrestd),
        ("idle: slurmctld CPU s/s", lambda f: f.idle.slurmctld),
        ("idle: slurmctld RPCs/s", lambda f: f.idle.rpcs),
        ("idle: clusterd RSS MB", lambda f: f.idle.rss_mb),
        (f"storm ({args.clients} clients): clusterd CPU s/s", lambda f: f.storm.clusterd),
        ("storm: slurmrestd CPU s/s", lambda f: f.storm.slurmrestd),
        ("storm: slurmctld CPU s/s", lambda f: f.storm.slurmctld),
        ("storm: slurmctld RPCs/s", lambda f: f.storm.rpcs),
        ("storm: clusterd RSS MB (peak)", lambda f: f.storm.rss_mb),
        ("storm: submits/s", lambda f: f.submits_per_s),
        ("watch latency s (median)", lambda f: median(f.watch_latency_s)),
        ("node kill -> first step s (median)", lambda f: median(f.recovery_first_step_s)),
    ]
    queue = {small: "empty queue", big: f"{args.jobs} held jobs"}
    sizes = ", ".join(f"{n} nodes: {queue.get(n, 'empty queue')}" for n in figures)
    head = "".join(f"{f'{n} nodes':>16s}" for n in figures)
    lines = [f"scale bench: Slurm {args.slurm or '22.05'}; {sizes}", f"{'':44s}{head}{'ratio':>9s}"]
    for label, get in rows:
        cells = "".join(f"{get(figures[n]):16.3f}" for n in figures)
        base = get(figures[small])
        lines.append(f"{label:44s}{cells}{get(figures[big]) / base if base else float('nan'):8.2f}x")
    idle_ratio = figures[big].idle.clusterd / figures[small].idle.clusterd
    late = median(figures[big].recovery_first_step_s) - median(figures[small].recovery_first_step_s)
    lines.append(f"goal: idle clusterd CPU within 2x: {idle_ratio:.2f}x ({'met' if idle_ratio <= 2 else 'NOT met'})")
    lines.append(f"goal: recovery within 1 s: {late:+.1f} s ({'met' if late <= 1 else 'NOT met'})")
    for n, f in figures.items():
        lines.append(
            f"{n} nodes: watch latencies {[round(x, 2) for x in f.watch_latency_s]}, first steps "
            f"{[round(x, 1) for x in f.recovery_first_step_s]}, idle RPC types {f.idle.rpc_types}"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slurm", default=None, help="the stack's Slurm release (stack.sh up --slurm VER)")
    p.add_argument("--sizes", default="6,256", help="node counts, comma-separated (default 6,256)")
    p.add_argument("--jobs", type=int, default=10_000, help="held jobs of bob's on the biggest size (default 10,000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of one whole read + one partial poll (0: skip)")
    p.add_argument("--window", type=float, default=15.0, help="seconds of idle polling per backend and mode")
    p.add_argument("--idle", type=float, default=60.0, help="seconds of the service's idle window")
    p.add_argument("--clients", type=int, default=16, help="clients of the submit storm")
    p.add_argument("--storm", type=float, default=20.0, help="seconds of the submit storm")
    p.add_argument("--watches", type=int, default=5, help="watch latency samples")
    p.add_argument("--recoveries", type=int, default=1, help="node kills per size")
    p.add_argument("--out", type=Path, default=None, help="also write the final table here")
    args = p.parse_args()
    args.sizes = sorted({int(n) for n in args.sizes.split(",")})
    if os.geteuid() != 0:
        raise SystemExit("run as root")
    text = report(asyncio.run(run(args)), args)
    print(f"\n{text}")
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
