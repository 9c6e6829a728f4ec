"""Health verdicts on healthy jobs: a soak of training jobs must raise no hang, straggler or drain.

``--jobs`` 2-node training jobs (examples/train.py: 0.1 s steps of real numpy work, checkpoints to
the stack's S3) run for ``--minutes`` under a clusterd whose progress-hang floor is ``--floor``
seconds (the stack tests' 3 s: the service default of 300 s would make the check vacuous). Every
verdict clusterd gives is counted as false: a restart of any cause, a straggler named (in a job's
status, or clusterd_straggler_verdicts_total on /metrics), a node it drained or scored (ListNodes'
health). The anchor, measured in the same run: one job whose rank 1 blocks while its beats go on;
the time from its last step to the verdict, against the floor (1.0x would be a verdict at the floor).

Run as root with the stack up: ``python -m bench.health`` (30 min with the defaults; ``--minutes 3``
for a short run). ``--slurm VER`` uses that release's stack.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack, stack_for
from tests.support.training import train_spec
from tests.support.wait import wait_for


def straggler_verdicts(daemon: Daemon) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        float(m.group(1)) for m in re.finditer(r"^clusterd_straggler_verdicts_total\{[^}]*\} (\S+)$", text, re.M)
    )


def steps_in_log(stack: Stack, name: str, job_id: str) -> int:
    path = stack.dir / "jobs" / "alice" / f"{name}-{job_id}.out"
    return sum(1 for line in path.read_text().splitlines() if line.startswith("STEP ")) if path.exists() else 0


def soak(stack: Stack, daemon: Daemon, jobs: int, minutes: float) -> tuple[int, int, int, int]:
    """(rank-steps, restarts, stragglers named, nodes scored) over the healthy run."""
    client = daemon.client("alice")
    steps = int(minutes * 60 / 0.1) + 1000  # never done before the soak ends: cancelled then
    names = [f"cchealth-{uuid.uuid4().hex[:6]}" for _ in range(jobs)]
    ids = [
        client.submit(train_spec(stack, n, "--steps", str(steps), "--every", "50", "--step-seconds", "0.1")).job.job_id
        for n in names
    ]
    named: set[tuple[str, str]] = set()
    try:
        wait_for(
            lambda: all(client.get(i).state == jobs_pb2.JOB_STATE_RUNNING for i in ids),
            timeout=120,
            what="jobs running",
        )
        end = time.monotonic() + minutes * 60
        while time.monotonic() < end:
            for job_id in ids:
                named |= {(job_id, s.node) for s in client.get(job_id).stragglers}
            time.sleep(2)
        restarts = sum(len(client.get(i).restarts) for i in ids)
        scored = sum(1 for n in daemon.client("root").nodes() if n.health)
        return sum(steps_in_log(stack, n, i) for n, i in zip(names, ids, strict=True)), restarts, len(named), scored
    finally:
        for job_id in ids:
            client.cancel(job_id)


def anchor(stack: Stack, daemon: Daemon) -> float:
    """Seconds from a blocked rank's last step to clusterd's verdict."""
    client = daemon.client("alice")
    name = f"cchealth-block-{uuid.uuid4().hex[:6]}"
    spec = train_spec(
        stack, name, "--steps", "400", "--every", "10", "--step-seconds", "0.1", "--block-rank", "1", "--block-at", "60"
    )
    job_id = client.submit(spec).job.job_id
    try:
        job = wait_for(lambda: (j := client.get(job_id)).restarts and j, timeout=120, interval=0.5, what="the verdict")
        restart = job.restarts[0]
        assert restart.detected_by == "progress", restart
        return float(restart.detected_at.ToNanoseconds() - restart.failed_at.ToNanoseconds()) / 1e9
    finally:
        client.cancel(job_id)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--jobs", type=int, default=2, help="healthy 2-node jobs at once")
    parser.add_argument("--floor", type=float, default=3.0, help="clusterd's progress-hang floor, seconds")
    parser.add_argument("--slurm", choices=("22.05", "24.11", "26.05"), help="the stack of this Slurm release")
    args = parser.parse_args()
    stack = stack_for(args.slurm)
    state = Path(tempfile.mkdtemp(prefix="ccbench-health-"))
    sockets = stack.dir / "run" / f"bench-{state.name}"
    daemon = Daemon(
        stack,
        state,
        socket_dir=sockets,
        socket_group="clusterctl",
        extra_env={"CLUSTERD_LIVENESS__PROGRESS_HANG_FLOOR_SECONDS": str(args.floor)},
    )
    daemon.start()
    try:
        rank_steps, restarts, named, scored = soak(stack, daemon, args.jobs, args.minutes)
        counted = straggler_verdicts(daemon)
        found = anchor(stack, daemon)
    finally:
        daemon.stop()
        subprocess.run(["rm", "-rf", str(sockets)], check=False)
    false = restarts + max(named, int(counted)) + scored
    print(
        f"healthy soak ({args.jobs} jobs x {args.minutes:g} min, {rank_steps} rank-steps, floor {args.floor:g} s): "
        f"{false} false verdicts (restarts {restarts}, stragglers {max(named, int(counted))}, nodes scored {scored})"
    )
    print(f"anchor: a blocked rank found {found:.1f} s after its last step = {found / args.floor:.2f}x the floor")
    return 1 if false else 0


if __name__ == "__main__":
    sys.exit(main())
