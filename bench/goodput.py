"""Goodput bench: the checkpoint interval autopilot against a sweep of fixed intervals, under chaos.

Same training job for every mode (examples/train.py, one node, 0.1 s steps, each save blocking
``--stall`` seconds as a big model's snapshot would, checkpoints to the stack's S3), all running at
once on the local stack under one clusterd. Failures come at Poisson times (mean ``--mtbf`` s): each
one kills the nodes of every bench job running then (``stack.sh kill-node``), so every mode meets
the same failures, until the last job ended; the nodes come back ``--revive`` s later. Each job
runs on its own node (one node per mode: the sweep needs as many nodes as modes, plus a spare).

Per mode: ETTR as clusterd reports it (``GetGoodput``) and as measured from the job's own log (the
steps it kept times its median step time, over submission to its last step), and the restarts.
Goals: the autopilot within 1 point of the best fixed interval (the anchor), the reported ratio
within 1% of the measured one. A job that did not finish is named and left out of the goals; a
pause of the whole machine (its wall clock jumping: clusterd cannot tell it from work) is reported.

clusterd learns the failure rate from what it sees; in a run of minutes its prior (one failure per
``--prior`` s per node) still weighs in, and the runs are short enough for luck to matter: read the
figures of a short run as a smoke test, the default for the comparison.

Run as root with the stack up: ``python -m bench.goodput`` (about 25 min; ``--minutes 1 --mtbf 30``
for a 3-minute smoke run). ``--slurm VER`` runs on that release's stack.
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.duration_pb2 import Duration

from clusterctl.client import ClusterClient
from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack, stack_for

STEP_SECONDS = 0.1
_STEP = re.compile(r"^STEP (\d+) rank 0 loss \S+ t (\S+)$", re.M)
_DONE = re.compile(r"^DONE rank 0 at step \d+ t (\S+)$", re.M)


@dataclass
class Job:
    mode: str  # "auto" or the fixed interval in seconds
    job_id: str
    log: Path
    submitted: float
    advised: list[float] = field(default_factory=list)


def start_clusterd(stack: Stack, floor: float, prior: float) -> tuple[Daemon, ClusterClient, Path]:
    state = Path(tempfile.mkdtemp(prefix="ccbench-goodput-"))
    sockets = stack.dir / "run" / f"bench-{state.name}"
    env = {
        "CLUSTERD_GOODPUT__INTERVAL_FLOOR_SECONDS": str(floor),
        "CLUSTERD_GOODPUT__PRIOR_NODE_MTBF_SECONDS": str(prior),
    }
    daemon = Daemon(stack, state, socket_dir=sockets, socket_group="clusterctl", extra_env=env)
    daemon.start()
    return daemon, ClusterClient(daemon.addr, stack.env["CLUSTERCTL_TOKEN"]), sockets


def submit(stack: Stack, client: ClusterClient, mode: str, steps: int, stall: float) -> Job:
    name = f"ccgoodput-{mode}-{uuid.uuid4().hex[:6]}"
    uri = f"s3://{stack.env['CLUSTERCTL_BUCKET']}/bench/{name}"
    command = [
        "python3",
        f"{stack.env['CLUSTERCTL_EXAMPLES']}/train.py",
        *("--ckpt", uri, "--steps", str(steps), "--step-seconds", str(STEP_SECONDS)),
        *("--interval", mode, "--auto-first", "10", "--save-stall", str(stall), "--timestamps"),
    ]
    spec = jobs_pb2.JobSpec(
        name=name,
        command=command,
        nodes=1,
        exclusive=True,
        environment={k: v for k, v in stack.env.items() if k.startswith("AWS_")},
        # Every failure is restarted (no crash-loop brake), and a node back from the dead is used again.
        restart_policy=jobs_pb2.RestartPolicy(
            max_restarts=1000, no_progress_limit=1000, exclude_failed_nodes=False, hang_timeout=Duration(seconds=30)
        ),
    )
    submitted = time.time()
    job_id = client.submit(spec).job.job_id
    return Job(mode, job_id, stack.dir / "jobs" / "alice" / f"{name}-{job_id}.out", submitted)


def chaos(
    stack: Stack, client: ClusterClient, jobs: list[Job], mtbf: float, revive: float, until: Callable[[], bool]
) -> int:
    """Poisson failures until ``until()``: each kills the node of every bench job running then; returns how many."""
    rng = random.Random(0)
    events = 0
    while True:
        due = time.time() + rng.expovariate(1 / mtbf)
        while time.time() < due and not until():
            time.sleep(min(2.0, max(0.0, due - time.time())))
        if until():
            return events
        nodes = sorted(
            {n for j in jobs if (s := client.get(j.job_id)).state == jobs_pb2.JOB_STATE_RUNNING for n in s.nodes}
        )
        if not nodes:
            continue
        events += 1
        print(f"  t+{time.time() - jobs[0].submitted:6.0f}s: killing {','.join(nodes)}", flush=True)
        kills = [threading.Thread(target=stack.stack_sh, args=("kill-node", n)) for n in nodes]
        for k in kills:
            k.start()
        for k in kills:
            k.join()
        time.sleep(revive)
        for n in nodes:
            stack.stack_sh("revive-node", n)


def measured_ettr(job: Job, steps: int) -> float | None:
    """ETTR from the job's log: its steps x median step time over submission to its last step; None
    when it did not finish (no DONE line: how many of its steps it kept is not in the log)."""
    text = job.log.read_text()
    end = _DONE.search(text)
    times = [(int(s), float(t)) for s, t in _STEP.findall(text)]
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(times) if b[0] == a[0] + 1]
    if end is None or not gaps:
        return None
    return steps * statistics.median(gaps) / (float(end.group(1)) - job.submitted)


class PauseWatch:
    """Wall-clock jumps of the whole machine (a paused VM): clusterd cannot see them (its own clock
    jumps too), so it counts them as whatever the job was doing, where the log counts them as lost."""

    def __init__(self, stop: threading.Event, *, over: float = 5.0) -> None:
        self.pauses: list[tuple[float, float]] = []  # (when, seconds)
        self._stop, self._over = stop, over
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        last = time.time()
        while not self._stop.wait(1.0):
            now = time.time()
            if now - last > 1.0 + self._over:
                self.pauses.append((last, now - last - 1.0))
            last = now


@dataclass
class Row:
    job: Job
    status: jobs_pb2.JobStatus
    goodput: jobs_pb2.GetGoodputResponse
    log_ettr: float | None  # None: the job did not finish

    @property
    def label(self) -> str:
        advised = f" ({statistics.median(self.job.advised):.0f}s)" if self.job.advised else ""
        return f"auto{advised}" if self.job.mode == "auto" else self.job.mode + "s"

    def diff(self) -> float | None:
        return abs(self.goodput.ettr - self.log_ettr) / self.log_ettr if self.log_ettr else None


def report(rows: list[Row], events: int, pauses: list[tuple[float, float]], start: float) -> None:
    """The table, then each goal met or not; jobs that did not finish stay out of the goals."""
    print(f"{events} failure events\n")
    head = ("interval", "restarts", "ETTR clusterd", "ETTR log", "rel diff", "lost s", "stall s")
    print("{:>14} {:>8} {:>14} {:>9} {:>9} {:>7} {:>8}".format(*head))
    for r in rows:
        log = f"{r.log_ettr:>9.4f}" if r.log_ettr is not None else f"{'-':>9}"
        diff = r.diff()
        rel = f"{diff:>9.2%}" if diff is not None else f"{'-':>9}"
        b = r.goodput.breakdown
        print(
            f"{r.label:>14} {len(r.status.restarts):>8} {r.goodput.ettr:>14.4f} {log} {rel} "
            f"{b.lost:>7.1f} {b.checkpoint_stall:>8.1f}"
        )
    for r in rows:
        if r.log_ettr is None:
            print(f"{r.label}: did not finish ({r.status.final_reason or jobs_pb2.JobState.Name(r.status.state)})")
    for when, seconds in pauses:
        print(f"the machine paused {seconds:.0f}s at t+{when - start:.0f}s (clusterd's clock jumped with it)")
    finished = [r for r in rows if r.log_ettr is not None]
    auto = next((r for r in finished if r.job.mode == "auto"), None)
    fixed = [r for r in finished if r.job.mode != "auto"]
    if auto is not None and fixed:
        best = max(fixed, key=lambda r: r.goodput.ettr)
        gap = 100 * (auto.goodput.ettr - best.goodput.ettr)
        print(
            f"\nautopilot {auto.goodput.ettr:.4f} vs best fixed ({best.label}) {best.goodput.ettr:.4f}: "
            f"{gap:+.2f} points (goal >= -1: {'met' if gap >= -1 else 'NOT met'})"
        )
    diffs = [d for r in finished if (d := r.diff()) is not None]
    if diffs:
        worst = max(diffs)
        print(
            f"reported vs log-measured ETTR: worst relative difference {worst:.2%} "
            f"(goal <= 1%: {'met' if worst <= 0.01 else 'NOT met'})"
        )
    if pauses:
        print("(clusterd counts a pause as what each job was doing then, the log as lost: not comparable)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--minutes", type=float, default=13.0, help="training time of each job without failures")
    p.add_argument("--mtbf", type=float, default=90.0, help="mean seconds between failures (Poisson)")
    p.add_argument("--stall", type=float, default=1.5, help="seconds each save blocks the step")
    p.add_argument("--fixed", default="5,10,20,40", help="fixed intervals to sweep (seconds)")
    p.add_argument("--revive", type=float, default=10.0, help="seconds a killed node stays dead")
    p.add_argument("--prior", type=float, default=600.0, help="clusterd's prior node MTBF (seconds)")
    p.add_argument("--floor", type=float, default=2.0, help="clusterd's interval floor (seconds)")
    p.add_argument("--slurm", default=None, help="the stack of this Slurm release")
    args = p.parse_args()
    stack = stack_for(args.slurm)
    steps = int(args.minutes * 60 / STEP_SECONDS)
    modes = ["auto", *[str(float(x)) for x in args.fixed.split(",")]]
    daemon, client, sockets = start_clusterd(stack, args.floor, args.prior)
    try:
        jobs = [submit(stack, client, m, steps, args.stall) for m in modes]
        print(
            f"goodput bench: {len(jobs)} jobs x {steps} steps of {STEP_SECONDS}s, save stall {args.stall}s, "
            f"failures every {args.mtbf:.0f}s (Poisson), prior node MTBF {args.prior:.0f}s",
            flush=True,
        )
        done = threading.Event()
        paused = PauseWatch(done)

        def watch_advice() -> None:  # what the autopilot advises, as the run goes
            while not done.wait(5):
                g = client.goodput(jobs[0].job_id)
                if g.HasField("checkpoint_interval"):
                    jobs[0].advised.append(g.checkpoint_interval.ToNanoseconds() / 1e9)

        watcher = threading.Thread(target=watch_advice, daemon=True)
        watcher.start()
        # Failures come until every job ended (each mode meets them over its whole run), or past the
        # deadline (a job that cannot finish is reported as it stands).
        deadline = time.time() + args.minutes * 60 * 2 + 600
        events = chaos(
            stack,
            client,
            jobs,
            args.mtbf,
            args.revive,
            lambda: time.time() >= deadline or all(client.get(j.job_id).terminal for j in jobs),
        )
        done.set()
        rows = [Row(j, client.get(j.job_id), client.goodput(j.job_id), measured_ettr(j, steps)) for j in jobs]
    finally:
        daemon.stop()
        subprocess.run(["rm", "-rf", str(sockets)], check=False)
    report(rows, events, paused.pauses, jobs[0].submitted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
