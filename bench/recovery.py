"""Recovery benchmark: what one failure costs, phase by phase, clusterd vs plain ``sbatch --requeue``.

Every run is the same training job (examples/train.py, 2 nodes, 0.1 s steps, checkpoints to the
stack's S3), on the same local stack, with the same SlurmdTimeout. Faults:

- node kill: ``stack.sh kill-node`` (slurmd and every process in the node's namespace, kill -9);
- node power-off: ``stack.sh kill-node --power-off`` (link down first: connections time out);
- rank crash: rank 1 exits 1 (``train.py --crash-rank``), its node stays healthy;
- rank hang: rank 1 is SIGSTOPped (a collective that never returns), its node stays healthy;
- "node kill, spare": the job holds one spare node (``--spare-nodes 1``) and is restarted in place;
- ", busy" after a node kill: the rest of the cluster runs other jobs (60 s) and one more waits in
  the queue when the node dies, so a requeued job waits its turn; one in place does not.

1. Phase table, medians over ``--repeats``: fault -> detected -> requeued -> running -> first step,
   in seconds after the fault, read from the job's restart record (clusterd keeps the time of each
   phase) and, for the first step, from the job's own log as a cross-check. Beside it, Slurm's own
   requeue of a killed node (no clusterd): fault -> running again -> first step.
2. Goodput: a ``--minutes`` run with one node death, against the same run without a failure,
   measured concurrently in the same invocation: wall-clock time of the failure-free run over that
   of the run with the failure (1.0 = the failure cost nothing).

Run as root with the stack up: ``python -m bench.recovery`` (about 35 min with the defaults;
``--repeats 1 --minutes 3`` for about 10 min). ``--slurm VER`` runs on the stack of that release
(``stack.sh up --slurm VER``); repeated, each release in turn, then the node-kill figures side by side.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
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
from tests.support.training import train_pids
from tests.support.wait import wait_for

STEP_SECONDS = 0.1
EVERY = 20
HANG_SECONDS = 5  # the benchmark jobs' hang timeout
PHASES = ("detected", "requeued", "relaunched", "running", "first_step")
BUSY_SECONDS = 60  # how long the other jobs of a busy-cluster run hold their nodes


class Clusterd:
    """Our own clusterd (tests.support.daemon) on a unix socket the jobs can reach (their heartbeats)."""

    def __init__(self, stack: Stack, extra_env: dict[str, str] | None = None) -> None:
        state = Path(tempfile.mkdtemp(prefix="ccbench-recovery-"))
        self.sockets = stack.dir / "run" / f"bench-{state.name}"
        self.daemon = Daemon(
            stack, state, socket_dir=self.sockets, socket_group="clusterctl", extra_env=dict(extra_env or {})
        )
        self.daemon.start()
        self.client = ClusterClient(self.daemon.addr, stack.env["CLUSTERCTL_TOKEN"])

    def close(self) -> None:
        self.daemon.stop()
        subprocess.run(["rm", "-rf", str(self.sockets)], check=False)


@dataclass
class Job:
    job_id: str
    name: str
    log: Path
    record: jobs_pb2.JobStatus | None = None
    extra: dict[str, float] = field(default_factory=dict)


def train_args(stack: Stack, uri: str, steps: int, *extra: str) -> list[str]:
    return [
        "python3",
        f"{stack.env['CLUSTERCTL_EXAMPLES']}/train.py",
        "--ckpt",
        uri,
        "--steps",
        str(steps),
        "--every",
        str(EVERY),
        "--step-seconds",
        str(STEP_SECONDS),
        *extra,
    ]


def submit(mode: str, stack: Stack, ours: Clusterd, steps: int, *extra: str, spares: int = 0) -> Job:
    name = f"ccrecov-{mode}-{uuid.uuid4().hex[:6]}"
    uri = f"s3://{stack.env['CLUSTERCTL_BUCKET']}/bench/{name}"
    aws = {k: v for k, v in stack.env.items() if k.startswith("AWS_")}
    jobdir = stack.dir / "jobs" / "alice"
    if mode == "clusterd":
        policy = jobs_pb2.RestartPolicy(hang_timeout=Duration(seconds=HANG_SECONDS))
        # Whole nodes, as training jobs have them: a node's death then hits one job, not every job packed on it.
        spec = jobs_pb2.JobSpec(
            name=name,
            command=train_args(stack, uri, steps, *extra),
            nodes=2,
            exclusive=True,
            environment=aws,
            restart_policy=policy,
            spare_nodes=spares,
        )
        job_id = ours.client.submit(spec).job.job_id
        return Job(job_id, name, jobdir / f"{name}-{job_id}.out")
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(aws.items()))
    script = (
        f"#!/bin/bash\n{exports}\nexport PATH={shlex.quote(stack.env['CLUSTERCTL_JOB_PYTHON'].rsplit('/', 1)[0])}"
        f":/usr/bin:/bin\nexec srun --kill-on-bad-exit=1 {shlex.join(train_args(stack, uri, steps, *extra))}\n"
    )
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--uid=alice",
            "--gid=alice",
            f"--chdir={jobdir}",
            "--requeue",
            "--open-mode=append",
            "-N2",
            "--exclusive",
            f"--job-name={name}",
            f"--output={jobdir}/{name}-%j.out",
        ],
        input=script,
        capture_output=True,
        text=True,
        check=True,
        env=stack.slurm_env(),
    ).stdout
    job_id = out.strip().split(";")[0]
    return Job(job_id, name, jobdir / f"{name}-{job_id}.out")


def squeue(stack: Stack, job_id: str) -> tuple[str, int, list[str]] | None:
    """(state, restart count, nodes) from ``squeue`` (job-filtered text output works on every version)."""
    out = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T|%N"], capture_output=True, text=True, env=stack.slurm_env()
    ).stdout.strip()
    if not out:
        return None
    state, nodes = out.split("|", 1)
    show = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, env=stack.slurm_env()
    ).stdout
    m = re.search(r"Restarts=(\d+)", show)
    hosts = subprocess.run(
        ["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, env=stack.slurm_env()
    ).stdout.split()
    return state, int(m.group(1)) if m else 0, hosts


def first_step_after(job: Job, restart: int, deadline: float) -> float | None:
    """Wall time at which the log first shows a STEP line of run ``restart`` (None past ``deadline``)."""
    while time.time() < deadline:
        text = job.log.read_text() if job.log.exists() else ""
        runs = re.split(r"^(?:START fresh|RESUMED from step)", text, flags=re.M)
        # each run starts with one START/RESUMED line per rank: run k begins after 2k such lines
        if len(runs) > 2 * restart + 2 and re.search(r"^STEP \d+", runs[-1], flags=re.M):
            return time.time()
        time.sleep(0.05)
    return None


def running_on_checkpoint(stack: Stack, job: Job) -> list[str]:
    """Wait until the job runs and has committed a checkpoint; its nodes."""
    wait_for(
        lambda: job.log.exists() and f"STEP {EVERY + 2} " in job.log.read_text(),
        300,
        interval=0.2,
        what=f"{job.name} past its first checkpoint",
    )
    view = squeue(stack, job.job_id)
    assert view is not None and view[0] == "RUNNING", view
    return view[2]


def rank_node(stack: Stack, job: Job) -> list[str]:
    """A node the job's ranks run on that does not run its batch script (whose death requeues)."""
    ranks = set(re.findall(r"^START fresh rank \d+/\d+ node (\S+)", job.log.read_text(), flags=re.M))
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", job.job_id], capture_output=True, text=True, env=stack.slurm_env()
    ).stdout
    batch = re.search(r"\bBatchHost=(\S+)", shown)
    return sorted(ranks - {batch.group(1) if batch else ""})[-1:]


def keep_busy(stack: Stack, ours: Clusterd) -> list[str]:
    """Other jobs on every idle node for BUSY_SECONDS, and one more waiting behind them: their ids."""
    idle = set(  # sinfo -N lists a node once per partition
        subprocess.run(
            ["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], capture_output=True, text=True, env=stack.slurm_env()
        ).stdout.split()
    )
    ids = []
    for nodes in (len(idle), 2):
        spec = jobs_pb2.JobSpec(name="ccrecov-busy", command=["sleep", str(BUSY_SECONDS)], nodes=nodes, exclusive=True)
        ids.append(ours.client.submit(spec).job.job_id)
    wait_for(lambda: ours.client.get(ids[0]).state == jobs_pb2.JOB_STATE_RUNNING, 60, interval=0.2, what="busy")
    return ids


def inject(fault: str, stack: Stack, job: Job, nodes: list[str]) -> tuple[float, str]:
    """Cause ``fault``; returns (its wall time, the node it hit)."""
    victim = nodes[-1]
    if fault.startswith("node kill"):
        t = time.time()
        stack.stack_sh("kill-node", victim)
    elif fault == "node power-off":
        t = time.time()
        stack.stack_sh("kill-node", victim, "--power-off")
    elif fault == "rank hang":
        (pid,) = train_pids(stack.netns(victim))
        t = time.time()
        os.kill(pid, signal.SIGSTOP)
    else:  # rank crash: already scheduled by --crash-at; its time is when the rank exited
        t = 0.0
    return t, victim


def one_recovery(fault: str, stack: Stack, ours: Clusterd, mode: str = "clusterd") -> dict[str, float]:
    """Seconds from the fault to each phase, for one fault on one fresh job."""
    extra = ("--crash-rank", "1", "--crash-at", str(EVERY * 2 + 5)) if fault == "rank crash" else ()
    spare = ", spare" in fault
    job = submit(mode, stack, ours, 100_000, *extra, spares=1 if spare else 0)
    victim = ""
    others: list[str] = []
    try:
        nodes = running_on_checkpoint(stack, job) if fault != "rank crash" else []
        if spare:
            nodes = rank_node(stack, job)
        if ", busy" in fault:
            others = keep_busy(stack, ours)
        t_fault, victim = inject(fault, stack, job, nodes) if nodes else (0.0, "")
        deadline = time.time() + 400
        if mode == "sbatch":
            wait_for(
                lambda: (v := squeue(stack, job.job_id)) is not None and v[0] == "RUNNING" and v[1] >= 1,
                400,
                interval=0.2,
                what="running again",
            )
            running = time.time()
            step = first_step_after(job, 1, deadline)
            return {"running": running - t_fault, "first_step": (step or float("nan")) - t_fault}
        step = first_step_after(job, 1, deadline)
        record = wait_for(
            lambda: (r := ours.client.get(job.job_id)).restarts and r.restarts[0].HasField("first_step_at") and r,
            30,
            interval=0.2,
            what="the restart's phases on the record",
        )
        restart = record.restarts[0]
        t_fault = t_fault or restart.failed_at.ToNanoseconds() / 1e9
        out = {
            p: getattr(restart, f"{p}_at").ToNanoseconds() / 1e9 - t_fault
            for p in PHASES
            if restart.HasField(f"{p}_at")
        }
        out["first_step (log)"] = (step or float("nan")) - t_fault
        out["by"] = restart.detected_by  # type: ignore[assignment]
        return out
    finally:
        subprocess.run(["scancel", job.job_id, *others], check=False, env=stack.slurm_env())
        if victim and fault.startswith("node"):
            stack.stack_sh("revive-node", victim)


def goodput(stack: Stack, ours: Clusterd, minutes: float) -> tuple[float, float, float]:
    """(wall of the failure-free run, wall of the run with one node death, seconds its restart took)."""
    steps = int(minutes * 60 / STEP_SECONDS)
    clean, failing = submit("clusterd", stack, ours, steps), submit("clusterd", stack, ours, steps)
    started = {j.job_id: time.time() for j in (clean, failing)}
    nodes = running_on_checkpoint(stack, failing)
    time.sleep(max(minutes * 60 * 0.4 - (time.time() - started[failing.job_id]), 0))
    t_kill, victim = inject("node kill", stack, failing, nodes)
    try:
        first_step_after(failing, 1, time.time() + 600)
        back = time.time() - t_kill
    finally:
        stack.stack_sh("revive-node", victim)

    def done(job: Job) -> Callable[[], bool]:
        return lambda: (
            f"DONE rank 0 at step {steps - 1}" in job.log.read_text()
            and (f"DONE rank 1 at step {steps - 1}" in job.log.read_text())
        )

    ends: dict[str, float] = {}
    deadline = time.time() + minutes * 60 * 3 + 600
    while len(ends) < 2 and time.time() < deadline:  # both watched together: each end to within 0.2 s
        for job in (clean, failing):
            if job.job_id not in ends and done(job)():
                ends[job.job_id] = time.time()
        time.sleep(0.2)
    assert len(ends) == 2, "the goodput runs did not finish"
    return (ends[clean.job_id] - started[clean.job_id], ends[failing.job_id] - started[failing.job_id], back)


NATIVE = "node kill, Slurm's own requeue"


def median_of(results: list[dict[str, float]], column: str) -> float | None:
    values = [r[column] for r in results if column in r and r[column] == r[column]]
    return statistics.median(values) if values else None


def run_one(args: argparse.Namespace, version: str | None) -> dict[str, list[dict[str, float]]]:
    """One release's runs (the stack of ``--slurm VERSION``): prints its phase table, returns the results."""
    stack = stack_for(version)
    ours = Clusterd(stack)
    table: dict[str, list[dict[str, float]]] = {}
    print(f"[Slurm {stack.slurm_version}: stack {stack.dir}]", flush=True)
    try:
        for fault in re.split(r",(?! ?(?:spare|busy)\b)", args.faults):
            for _ in range(args.repeats):
                result = one_recovery(fault, stack, ours)
                table.setdefault(fault, []).append(result)
                print(
                    f"  {fault}: "
                    + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()),
                    flush=True,
                )
        for _ in range(args.native_repeats):
            result = one_recovery("node kill", stack, ours, mode="sbatch")
            table.setdefault(NATIVE, []).append(result)
            print(f"  native node kill: {result}", flush=True)
        good = None if args.skip_goodput else goodput(stack, ours, args.minutes)
    finally:
        ours.close()
    config = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, env=stack.slurm_env()
    ).stdout
    m = re.search(r"SlurmdTimeout\s*=\s*(\S+)", config)
    print(
        f"\nrecovery bench: Slurm {stack.slurm_version}, 2-node train.py job, same stack, "
        f"SlurmdTimeout={m.group(1) if m else '?'}, hang timeout {HANG_SECONDS} s; seconds after the fault, medians"
    )
    cols = (*PHASES, "first_step (log)")
    print(f"{'fault':34}{'n':>3}" + "".join(f"{c:>{max(12, len(c) + 1)}}" for c in cols) + "  detected by")
    for fault, results in table.items():
        widths = [max(12, len(c) + 1) for c in cols]
        cells = [
            f"{v:{w}.1f}" if (v := median_of(results, c)) is not None else f"{'-':>{w}}"
            for c, w in zip(cols, widths, strict=True)
        ]
        by = ",".join(sorted({str(r.get("by", "slurm")) for r in results}))
        print(f"{fault:34}{len(results):>3}" + "".join(cells) + f"  {by}")
    anchor = median_of(table.get(NATIVE, []), "first_step")
    ours_first = median_of(table.get("node kill", []), "first_step")
    if anchor is not None and ours_first is not None:
        print(
            f"node kill -> first step: clusterd {ours_first:.1f} s vs Slurm's own requeue {anchor:.1f} s "
            f"= {anchor / ours_first:.1f}x faster"
        )
    else:
        print("node kill -> first step ratio: no anchor (run with --native-repeats >= 1 and the node-kill fault)")
    for kind in ("node kill, spare", "node kill, spare, busy"):
        requeued = median_of(table.get(kind.replace(", spare", ""), []), "first_step")
        in_place = median_of(table.get(kind, []), "first_step")
        if requeued is not None and in_place is not None:
            print(
                f"{kind} -> first step: {in_place:.1f} s vs requeue {requeued:.1f} s = {requeued / in_place:.1f}x "
                "faster (goal <= 2 s)"
            )
    if good is not None:
        clean, failing, back = good
        print(
            f"goodput, {args.minutes:g}-min run with one node death: {clean / failing:.3f} of the failure-free run "
            f"(wall {failing:.0f} s vs {clean:.0f} s, measured concurrently; first step {back:.1f} s after the kill)"
        )
    return table


def side_by_side(tables: dict[str, dict[str, list[dict[str, float]]]]) -> None:
    """Node death -> running again and -> first step, ours vs Slurm's own requeue, one row per release."""
    print("\nnode kill, per Slurm release (medians, seconds after the kill; ratio = Slurm's own / ours)")
    head = ("release", "n ours/own", "running ours", "running own", "ratio", "1st step ours", "1st step own", "ratio")
    print(f"{head[0]:8}{head[1]:>12}" + "".join(f"{h:>15}" for h in head[2:]))
    for version, table in tables.items():
        ours, own = table.get("node kill", []), table.get(NATIVE, [])
        cells = []
        for column in ("running", "first_step"):
            a, b = median_of(ours, column), median_of(own, column)
            cells += [
                f"{a:15.1f}" if a is not None else f"{'-':>15}",
                f"{b:15.1f}" if b is not None else f"{'-':>15}",
                f"{b / a:14.1f}x" if a and b is not None else f"{'-':>15}",
            ]
        print(f"{version:8}{f'{len(ours)}/{len(own)}':>12}" + "".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs per fault (medians)")
    parser.add_argument("--native-repeats", type=int, default=3, help="node kills with Slurm's own requeue")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of each goodput run")
    parser.add_argument(
        "--faults",
        default="node kill,node kill, spare,node kill, busy,node kill, spare, busy,node power-off,rank crash,rank hang",
    )
    parser.add_argument("--skip-goodput", action="store_true")
    parser.add_argument(
        "--slurm",
        action="append",
        choices=("22.05", "24.11", "26.05"),
        metavar="VER",
        help="the stack of this Slurm release (stack.sh up --slurm VER); repeat to run each and "
        "print the node-kill figures side by side (default: CLUSTERCTL_STACK_DIR's)",
    )
    args = parser.parse_args()
    tables = {}
    for version in args.slurm or [None]:
        tables[version or stack_for(None).slurm_version] = run_one(args, version)
    if any(t.get("node kill") or t.get(NATIVE) for t in tables.values()):
        side_by_side(tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
