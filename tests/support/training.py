"""The training job of the recovery tests (examples/train.py) and how to read what it printed.

The job prints ``STEP <n> rank <r>`` per step and ``START``/``RESUMED from step <s>`` per run, so a
test can prove from the job's own log what a failure cost in steps.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from clusterctl.v1 import jobs_pb2

from .daemon import Daemon
from .stack import Stack
from .wait import wait_for


def train_spec(
    stack: Stack,
    name: str,
    *args: str,
    nodes: int = 2,
    time_limit: str = "",
    policy: jobs_pb2.RestartPolicy | None = None,
) -> jobs_pb2.JobSpec:
    env = {k: v for k, v in stack.env.items() if k.startswith("AWS_")}
    return jobs_pb2.JobSpec(
        name=name,
        command=["python3", f"{stack.env['CLUSTERCTL_EXAMPLES']}/train.py", *args],
        nodes=nodes,
        checkpoint_uri=f"s3://{stack.env['CLUSTERCTL_BUCKET']}/tests/{name}",
        environment=env,
        time_limit=time_limit,
        restart_policy=policy,
    )


@dataclass
class Run:
    header: str  # START ... / RESUMED ...
    resumed_from: int | None
    nodes: dict[int, str]  # rank -> node
    steps: dict[int, list[int]]  # rank -> steps printed


def runs_of(text: str) -> list[Run]:
    """Split the job's appended log into runs; a run starts with a START or RESUMED line per rank."""
    runs: list[Run] = []
    for line in text.splitlines():
        m = re.match(r"(START fresh|RESUMED from step (\d+)) rank (\d+)/\d+ node (\S+)", line)
        if m:
            rank = int(m.group(3))
            if not runs or rank in runs[-1].nodes:
                runs.append(Run(line, int(m.group(2)) if m.group(2) else None, {}, {}))
            runs[-1].nodes[rank] = m.group(4)
            runs[-1].steps.setdefault(rank, [])
            continue
        m = re.match(r"STEP (\d+) rank (\d+)", line)
        if m and runs:
            runs[-1].steps.setdefault(int(m.group(2)), []).append(int(m.group(1)))
    return runs


def log_of(stack: Stack, name: str, job_id: str) -> str:
    return (stack.dir / "jobs" / "alice" / f"{name}-{job_id}.out").read_text()


def finished(daemon: Daemon, job_id: str, timeout: float = 300) -> jobs_pb2.JobStatus:
    client = daemon.client("alice")
    return wait_for(
        lambda: (j := client.get(job_id)).terminal and j,
        timeout=timeout,  # type: ignore[no-any-return]
        interval=1,
        what=f"job {job_id} to finish",
    )


def check_resume(
    stack: Stack,
    name: str,
    job: jobs_pb2.JobStatus,
    victim: str,
    every: int,
    total: int,
    *,
    exact_restart_step: bool = True,
) -> None:
    """The job resumed on other nodes from a checkpoint within one interval of where the dead rank stopped.

    ``exact_restart_step=False`` lets the restart record's step lag the resumed one by up to one
    interval: a heartbeat-detected restart records the step the service last read, and a checkpoint
    committed since that read is still the one the job restores (seen in tests/compat, 2 of 5 runs).
    """
    runs = runs_of(log_of(stack, name, job.job_id))
    assert len(runs) >= 2, [r.header for r in runs]
    first, second = runs[0], runs[1]
    dead_rank = next(r for r, n in first.nodes.items() if n == victim)
    last_dead = max(first.steps[dead_rank])
    resumed = second.resumed_from
    assert resumed is not None, second.header
    # Nothing lost beyond one checkpoint interval and the save in flight: the resume point is within
    # `every` steps of where the dead rank stopped, or of the step before its last save began when
    # the node died while that (asynchronous) save was still committing and the rank had run on.
    last_save = last_dead - (last_dead + 1) % every  # the newest step a save began at, when it died
    in_flight = last_dead - last_save <= _SAVE_IN_FLIGHT_STEPS
    lowest = (last_save - every) if in_flight else (last_dead - every)
    assert lowest <= resumed <= last_dead, (last_dead, resumed)
    assert victim not in second.nodes.values()
    # The job printed the step it actually restored (CheckpointManager.last_restored_step).
    assert f"resume_step {resumed}" in second.header, second.header
    for rank in (0, 1):
        assert second.steps[rank][0] == resumed + 1
        assert runs[-1].steps[rank][-1] == total - 1
    if exact_restart_step:
        assert job.restarts[0].checkpoint_step == resumed
    else:
        assert resumed - every <= job.restarts[0].checkpoint_step <= resumed, (job.restarts[0], resumed)


EVERY, TOTAL = 20, 500  # checkpoint interval and length (steps of 0.1 s) of the node-death runs
# Steps a rank may run while its asynchronous save still commits (a small model to S3: ~0.1-0.3 s).
_SAVE_IN_FLIGHT_STEPS = 3


def training_with_checkpoints(daemon: Daemon, stack: Stack, name: str) -> tuple[jobs_pb2.JobStatus, str]:
    """A 2-node training job that has committed two checkpoints; returns it and the node to kill."""
    client = daemon.client("alice")
    job = client.submit(
        train_spec(stack, name, "--steps", str(TOTAL), "--every", str(EVERY), "--step-seconds", "0.1")
    ).job
    running = wait_for(
        lambda: (
            (j := client.get(job.job_id)).state == jobs_pb2.JOB_STATE_RUNNING
            and j.checkpoint_step >= EVERY * 2 - 1
            and j
        ),
        timeout=120,
        what="first checkpoints",
    )
    return job, running.nodes[-1]


def train_pids(node: str) -> list[int]:
    """The training processes (examples/train.py) running in ``node``'s network namespace."""
    out = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True, check=True).stdout
    pids = []
    for pid in map(int, out.split()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # ended meanwhile
        if any(a.endswith(b"train.py") for a in argv) and b"python3" in argv[0]:
            pids.append(pid)
    return pids
