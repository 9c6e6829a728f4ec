"""Submits through the Slurm seam alone (no gRPC, no store) against raw sbatch, side by side.

Where :mod:`bench.submit` measures the whole service, this measures its floor: each backend's
``submit`` of the same tiny job (``JobRequest``), driven by C concurrent asyncio workers, against C
concurrent ``sbatch --uid`` processes run as root, in ABBA halves, then sequential p50s. What the
service adds on top of a backend is the gap between the two benchmarks.

    python -m bench.seam                     # 160 jobs each way, 16 workers (stack up, root)
    python -m bench.seam --jobs 320 --slurm 24.11
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import pwd
import statistics
import time
from collections.abc import Awaitable, Callable

from bench.submit import TINY_JOB, cancel_by_name, raw_sbatch_argv
from clusterd.config import SlurmConfig
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.commands import CommandsBackend
from clusterd.slurm.request import JobRequest
from clusterd.slurm.restd import RestdBackend
from tests.support.stack import stack_for

Submit = Callable[[], Awaitable[object]]


async def timed(submit: Submit, jobs: int, workers: int) -> tuple[float, list[float]]:
    """(submissions/s, latencies) for ``jobs`` submissions spread over ``workers`` tasks."""
    left = list(range(jobs))
    latencies: list[float] = []

    async def worker() -> None:
        while left:
            left.pop()
            t0 = time.perf_counter()
            await submit()
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return jobs / (time.perf_counter() - started), latencies


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=160, help="concurrent submissions each way (default 160)")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--sequential", type=int, default=20, help="sequential submissions each way (default 20)")
    p.add_argument("--user", default="alice")
    p.add_argument("--slurm", choices=("22.05", "24.11", "26.05"), help="the stack of this release")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: raw sbatch uses --uid and the commands backend runs sbatch as the user")
    stack = stack_for(args.slurm)
    env = stack.slurm_env()
    user = pwd.getpwnam(args.user)
    name = f"ccseam-{os.getpid()}"
    config = SlurmConfig(
        slurm_conf=env.get("SLURM_CONF", ""),
        bin_dir=stack.slurm_bin,
        default_partition="debug",
        restd_url=stack.env.get("CLUSTERCTL_RESTD_URL", ""),
        jwt_key_file=stack.env.get("CLUSTERCTL_JWT_KEY", ""),
    )
    request = JobRequest(
        script=TINY_JOB,
        name=name,
        user=args.user,
        partition="debug",
        working_directory="/tmp",
        submit_directory="/tmp",
        stdout="/dev/null",
    )
    sbatch = os.path.join(stack.slurm_bin, "sbatch") if stack.slurm_bin else "sbatch"
    argv = raw_sbatch_argv(sbatch, user.pw_uid, user.pw_gid, name)

    async def raw() -> None:
        pipe = asyncio.subprocess.PIPE
        proc = await asyncio.create_subprocess_exec(*argv, env=env, stdin=pipe, stdout=pipe, stderr=pipe)
        _, err = await proc.communicate(TINY_JOB.encode())
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch failed: {err.decode().strip()}")

    backends: dict[str, SlurmBackend] = {"commands": CommandsBackend(config)}
    if config.restd_url and config.jwt_key_file:
        backends["slurmrestd"] = RestdBackend(config)
    else:
        print("slurmrestd: anchor row missing (the stack's env file names no CLUSTERCTL_RESTD_URL)")
    ways: dict[str, Submit] = {"raw sbatch": raw}
    for label, backend in backends.items():
        ways[label] = functools.partial(backend.submit, request)
    rates: dict[str, list[float]] = {k: [] for k in ways}
    sequential: dict[str, list[float]] = {k: [] for k in ways}
    try:
        for submit in ways.values():
            await submit()  # warm-up: connections, the API version, sbatch in the page cache
        for way in [*ways, *reversed(ways)]:  # ABBA halves
            rate, _ = await timed(ways[way], args.jobs // 2, args.workers)
            rates[way].append(rate)
            cancel_by_name(name, env)
            await asyncio.sleep(2)
        for _ in range(args.sequential):  # interleaved one by one
            for way, submit in ways.items():
                sequential[way] += (await timed(submit, 1, 1))[1]
    finally:
        cancel_by_name(name, env)
    anchor_rate = statistics.mean(rates["raw sbatch"])
    anchor_p50 = statistics.median(sequential["raw sbatch"])
    print(f"seam bench, Slurm {stack.slurm_version}: {args.jobs} jobs each way, {args.workers} workers")
    print(f"{'':12} {'submits/s':>10} {'halves':>12} {'ratio':>6} {'p50 ms':>7} {'p50 ratio':>9}")
    for way in ways:
        rate, p50 = statistics.mean(rates[way]), statistics.median(sequential[way])
        halves = "/".join(f"{r:.0f}" for r in rates[way])
        print(
            f"{way:12} {rate:10.1f} {halves:>12} {rate / anchor_rate:5.2f}x {p50 * 1000:7.1f} {p50 / anchor_p50:8.2f}x"
        )


if __name__ == "__main__":
    asyncio.run(main())
