"""Elastic continuation end to end: a -N 2-3 job loses a node for good and finishes on 2.

Real Slurm, real S3, examples/train_elastic.py (state sharded over the ranks). The candidate
nodes are limited to one leaf of three, so after one is killed Slurm can only start the job again
on two: the job must resume from the checkpoint written by three ranks, resharded for two, and
the restart record must say that the world size changed. This kills a node of the shared stack:
run it rarely, alone (``-k elastic``); the node is always revived.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from clusterctl.v1 import cluster_pb2, jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.wait import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
LEAF = ("node4", "node5", "node6")  # one leaf switch: the job's only candidates
EVERY, TOTAL = 10, 300  # checkpoint interval and length, in steps of 0.1 s


def elastic_spec(stack: Stack, name: str) -> jobs_pb2.JobSpec:
    env = {k: v for k, v in stack.env.items() if k.startswith("AWS_")}
    # The job runs this checkout's client library (the stack's job environment may predate Sharded).
    env["PYTHONPATH"] = str(ROOT / "client")
    others = [n for n in stack.env["CLUSTERCTL_NODES"].split() if n not in LEAF]
    return jobs_pb2.JobSpec(
        name=name,
        command=[
            "python3",
            str(ROOT / "examples" / "train_elastic.py"),
            "--steps",
            str(TOTAL),
            "--every",
            str(EVERY),
            "--step-seconds",
            "0.1",
        ],
        nodes=2,
        max_nodes=3,  # -N 2-3 (no --ntasks-per-node: sbatch would derive 2 tasks and start 2 nodes)
        checkpoint_uri=f"s3://{stack.env['CLUSTERCTL_BUCKET']}/tests/{name}",
        environment=env,
        placement=cluster_pb2.PlacementPreference(exclude_nodes=others),
    )


def test_lost_node_restarts_on_fewer_nodes_from_the_resharded_checkpoint(daemon: Daemon, stack: Stack) -> None:
    name = f"elastic-{uuid.uuid4().hex[:6]}"
    client = daemon.client("alice")
    job = client.submit(elastic_spec(stack, name)).job
    try:
        running = wait_for(
            lambda: (
                (j := client.get(job.job_id)).state == jobs_pb2.JOB_STATE_RUNNING
                and j.checkpoint_step >= 2 * EVERY - 1
                and j
            ),
            timeout=180,
            what="the first checkpoints",
        )
    except AssertionError:
        client.cancel(job.job_id)
        raise
    if len(running.nodes) != 3:
        client.cancel(job.job_id)
        pytest.skip(f"only {list(running.nodes)} of {LEAF} were free: cannot show a shrink from 3")
    victim = running.nodes[-1]
    try:
        stack.stack_sh("kill-node", victim)
        t_kill = time.monotonic()
        decided: list[float] = []

        def running_again() -> jobs_pb2.JobStatus | None:
            j = client.get(job.job_id)
            if j.restarts and not decided:
                decided.append(time.monotonic() - t_kill)
            return j if j.restart_count >= 1 and j.state == jobs_pb2.JOB_STATE_RUNNING else None

        again = wait_for(running_again, timeout=240, what="running again")
        print(
            f"restart decided {decided[0]:.0f}s and running again {time.monotonic() - t_kill:.0f}s "
            f"after {victim} died, on {list(again.nodes)}"
        )
        assert len(again.nodes) == 2 and victim not in again.nodes
    finally:
        stack.stack_sh("revive-node", victim)
    done = wait_for(lambda: (j := client.get(job.job_id)).terminal and j, timeout=240, interval=1, what="the end")
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    (restart,) = done.restarts
    assert restart.cause == jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE and victim in restart.failed_nodes
    assert (restart.nodes_before, restart.nodes_after) == (3, 2)
    assert "resumed on 2 nodes (was 3)" in restart.detail, restart.detail

    log = (stack.dir / "jobs" / "alice" / f"{name}-{job.job_id}.out").read_text()
    resumed = re.findall(r"RESUMED from step (\d+) rank (\d)/(\d) node \S+ saved_world (\d)", log)
    assert sorted((int(r), int(w), int(s)) for _, r, w, s in resumed) == [(0, 2, 3), (1, 2, 3)], resumed
    step = int(resumed[0][0])
    assert step == restart.checkpoint_step and step >= 2 * EVERY - 1
    assert sorted(re.findall(rf"VERIFIED restored step {step} rank (\d)/2", log)) == ["0", "1"]
    assert sorted(re.findall(rf"DONE rank (\d)/2 at step {TOTAL - 1} final state verified", log)) == ["0", "1"]

    shown = subprocess.run(
        [sys.executable, "-m", "clusterctl.cli.main", "status", job.job_id, "--json"],
        env=daemon.cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    (record,) = json.loads(shown.stdout)["restarts"]
    assert (record["nodes_before"], record["nodes_after"]) == (3, 2)
    assert "resumed on 2 nodes (was 3)" in record["detail"]
