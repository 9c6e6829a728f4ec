"""Recovery benchmark: what one dead node costs, clusterd vs plain ``sbatch --requeue``.

Both modes run the same training job (examples/train.py, 2 nodes, checkpoints to the stack's S3
every ``--every`` steps) on the same local stack with the same SlurmdTimeout, and lose the same
node the same way (``stack.sh kill-node``: slurmd and every process in the node's namespace, kill -9).

1. Time from the node's death to the job RUNNING again on healthy nodes (read from squeue).
   Plain Slurm requeues the job itself but holds it ~120 s (BeginTime) before it may start;
   clusterd excludes the dead node and releases the job at once.
2. Goodput over a ``--minutes`` training run with one node failure at 30% of it: useful steps
   (the job's total) per wall-clock second from submission to completion, and the steps redone
   after the restart (work lost), read from the job's own log.

Run as root with the stack up: ``python -m bench.recovery`` (about 35 min with the default
10-minute goodput runs; ``--minutes 3`` for about 15 min). Prints one table; the ratio is
ours / plain for rates and plain / ours for times.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterctl.client import ClusterClient
from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.paths import ROOT
from tests.support.stack import STACK_DIR, Stack
from tests.support.wait import wait_for

STEP_SECONDS = 0.1


def stack_sh(*args: str) -> None:
    subprocess.run(["bash", str(ROOT / "deploy/local/stack.sh"), *args], check=True, capture_output=True,
                   timeout=300)  # fmt: skip


def squeue(job_id: str) -> dict[str, Any] | None:
    out = subprocess.run(["squeue", "--all", "--json"], capture_output=True, text=True, check=True).stdout
    return next((j for j in json.loads(out)["jobs"] if str(j["job_id"]) == job_id), None)


class Clusterd:
    """Our own clusterd (tests.support.daemon) on loopback TCP, poll interval 1 s, and a client of it."""

    def __init__(self, stack: Stack) -> None:
        state = Path(tempfile.mkdtemp(prefix="ccbench-recovery-"))
        self.daemon = Daemon(stack, state, metrics_port=None, tcp=True)
        self.daemon.start()
        self.client = ClusterClient(self.daemon.addr, stack.env["CLUSTERCTL_TOKEN"])

    def close(self) -> None:
        self.daemon.stop()


@dataclass
class Job:
    job_id: str
    name: str
    submitted: float


def train_args(env: dict[str, str], uri: str, steps: int, every: int) -> list[str]:
    return ["python3", f"{env['CLUSTERCTL_EXAMPLES']}/train.py", "--ckpt", uri, "--steps", str(steps),
            "--every", str(every), "--step-seconds", str(STEP_SECONDS)]  # fmt: skip


def submit(mode: str, env: dict[str, str], daemon: Clusterd, steps: int, every: int) -> Job:
    name = f"ccrecov-{mode}-{uuid.uuid4().hex[:6]}"
    uri = f"s3://{env['CLUSTERCTL_BUCKET']}/bench/{name}"
    aws = {k: v for k, v in env.items() if k.startswith("AWS_")}
    t0 = time.monotonic()
    if mode == "clusterd":
        spec = jobs_pb2.JobSpec(name=name, command=train_args(env, uri, steps, every), nodes=2, gpus_per_node=1,
                                environment=aws)  # fmt: skip
        return Job(daemon.client.submit(spec).job.job_id, name, t0)
    jobdir = STACK_DIR / "jobs" / "alice"
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(aws.items()))
    script = (f"#!/bin/bash\n{exports}\nexport PATH={shlex.quote(env['CLUSTERCTL_JOB_PYTHON'].rsplit('/', 1)[0])}"
              f":/usr/bin:/bin\nexec srun --kill-on-bad-exit=1 {shlex.join(train_args(env, uri, steps, every))}\n")
    out = subprocess.run(
        ["sbatch", "--parsable", "--uid=alice", "--gid=alice", f"--chdir={jobdir}", "--requeue",
         "--open-mode=append", "-N2", "--gres=gpu:1", f"--job-name={name}", f"--output={jobdir}/{name}-%j.out"],
        input=script, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return Job(out.strip().split(";")[0], name, t0)


def running(job: Job) -> dict[str, Any] | None:
    j = squeue(job.job_id)
    return j if j and j["job_state"] == "RUNNING" else None


def running_again(job: Job) -> dict[str, Any] | None:
    j = running(job)
    return j if j and j.get("restart_cnt", 0) >= 1 else None


def expand(nodes: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, check=True)
    return out.stdout.split()


def kill_one_node(job: Job) -> tuple[str, float]:
    j = wait_for(lambda: running(job), 300, what="job running")
    victim = expand(j["nodes"])[-1]
    stack_sh("kill-node", victim)
    return victim, time.monotonic()


def cancel(job: Job) -> None:
    subprocess.run(["scancel", job.job_id], check=False)


def recovery_time(mode: str, env: dict[str, str], daemon: Clusterd) -> float:
    job = submit(mode, env, daemon, steps=100_000, every=20)
    victim, t_kill = kill_one_node(job)
    try:
        j = wait_for(lambda: running_again(job), 600, what="running again")
        assert victim not in expand(j["nodes"]), "restarted on the dead node"
        return time.monotonic() - t_kill
    finally:
        cancel(job)
        stack_sh("revive-node", victim)


def steps_lost(log: str, victim: str) -> int:
    """Steps the dead node's rank had done that the restarted job did again."""
    dead_rank = None
    last: dict[int, int] = {}
    for line in log.splitlines():
        if (m := re.match(r"START fresh rank (\d+)/\d+ node (\S+)", line)) and m.group(2) == victim:
            dead_rank = int(m.group(1))
        if (m := re.match(r"RESUMED from step (\d+)", line)) and dead_rank is not None:
            return max(last.get(dead_rank, 0) - int(m.group(1)), 0)
        if m := re.match(r"STEP (\d+) rank (\d+)", line):
            last[int(m.group(2))] = int(m.group(1))
    return -1


def goodput(mode: str, env: dict[str, str], daemon: Clusterd, minutes: float) -> tuple[float, int, float]:
    steps = int(minutes * 60 / STEP_SECONDS)
    every = max(steps // 30, 10)
    job = submit(mode, env, daemon, steps=steps, every=every)
    wait_for(lambda: running(job), 300, what="job running")
    time.sleep(minutes * 60 * 0.3)
    victim, t_kill = kill_one_node(job)
    try:
        wait_for(lambda: running_again(job), 900, what="running again")
        back = time.monotonic() - t_kill
    finally:
        stack_sh("revive-node", victim)
    wait_for(lambda: (j := squeue(job.job_id)) is not None and j["job_state"] == "COMPLETED",
             minutes * 60 * 3 + 600, interval=2, what="job finished")  # fmt: skip
    wall = time.monotonic() - job.submitted
    log = (STACK_DIR / "jobs" / "alice" / f"{job.name}-{job.job_id}.out").read_text()
    return steps / wall, steps_lost(log, victim), back


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="node kills per mode for the recovery time")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of each goodput run (no failure)")
    parser.add_argument("--skip-goodput", action="store_true")
    args = parser.parse_args()
    stack = Stack.load()
    env = stack.env
    daemon = Clusterd(stack)
    rows: list[tuple[str, str, str, str]] = []
    try:
        times: dict[str, list[float]] = {"clusterd": [], "sbatch": []}
        for i in range(args.repeats):
            for mode in ("clusterd", "sbatch") if i % 2 == 0 else ("sbatch", "clusterd"):
                times[mode].append(recovery_time(mode, env, daemon))
                print(f"  recovery {mode}: {times[mode][-1]:.0f} s", flush=True)
        ours, plain = statistics.median(times["clusterd"]), statistics.median(times["sbatch"])
        rows.append((f"node death -> running again (s, median of {args.repeats})", f"{ours:.0f}", f"{plain:.0f}",
                     f"{plain / ours:.2f}x faster"))  # fmt: skip
        if not args.skip_goodput:
            results = {mode: goodput(mode, env, daemon, args.minutes) for mode in ("clusterd", "sbatch")}
            for mode, (rate, lost, back) in results.items():
                print(f"  goodput {mode}: {rate:.2f} steps/s, {lost} steps redone, back after {back:.0f} s", flush=True)
            (g_ours, l_ours, b_ours), (g_plain, l_plain, b_plain) = results["clusterd"], results["sbatch"]
            ideal = 1 / STEP_SECONDS
            rows += [
                (f"goodput, {args.minutes:g}-min run, 1 node death (steps/s; no-failure ideal < {ideal:.0f})",
                 f"{g_ours:.2f}", f"{g_plain:.2f}", f"{g_ours / g_plain:.2f}x"),
                ("  time to running again in that run (s)", f"{b_ours:.0f}", f"{b_plain:.0f}",
                 f"{b_plain / b_ours:.2f}x faster"),
                ("  steps redone after the restart", str(l_ours), str(l_plain), ""),
            ]  # fmt: skip
    finally:
        daemon.close()
    slurmd_timeout = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    m = re.search(r"SlurmdTimeout\s*=\s*(\S+)", slurmd_timeout)
    print(f"\nrecovery bench: 2-node train.py job, same stack, SlurmdTimeout={m.group(1) if m else '?'}")
    print(f"{'':72}{'clusterd':>10}{'sbatch':>10}  ratio")
    for label, a, b, ratio in rows:
        print(f"{label:72}{a:>10}{b:>10}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
