"""clusterd end to end on each release and backend variant: a command job in the job environment,
and the node-death recovery the service exists for (requeue on healthy nodes, resume from the
newest checkpoint). The recovery checks are tests.support.training's, as in tests/integration."""

from __future__ import annotations

import time
import uuid

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.training import EVERY, TOTAL, check_resume, finished, log_of, training_with_checkpoints
from tests.support.wait import wait_for


def test_command_job_runs_in_the_job_environment(compat_daemon: Daemon, stack: Stack) -> None:
    """``command`` becomes a generated script whose srun runs the job venv's python on every node."""
    name = f"cmd-{uuid.uuid4().hex[:6]}"
    code = "import clusterctl, os, sys; print('PY', sys.version_info[0], os.environ['SLURM_PROCID'], flush=True)"
    spec = jobs_pb2.JobSpec(name=name, command=["python3", "-c", code], nodes=2)
    job = compat_daemon.client("alice").submit(spec).job
    done = finished(compat_daemon, job.job_id, timeout=120)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    assert sorted(log_of(stack, name, job.job_id).split("\n")[:2]) == ["PY 3 0", "PY 3 1"]


def test_node_death_requeues_and_resumes_from_checkpoint(
    compat_daemon: Daemon, stack: Stack, killed_nodes: list[str]
) -> None:
    name = f"compat-kill-{uuid.uuid4().hex[:6]}"
    client = compat_daemon.client("alice")
    job, victim = training_with_checkpoints(compat_daemon, stack, name)
    killed_nodes.append(victim)
    stack.stack_sh("kill-node", victim)
    t_kill = time.monotonic()
    again = wait_for(
        lambda: (j := client.get(job.job_id)).restart_count >= 1 and j.state == jobs_pb2.JOB_STATE_RUNNING and j,
        timeout=240,
        what="running again",
    )
    print(f"Slurm {stack.slurm_version}: running again {time.monotonic() - t_kill:.0f}s after the node died")
    assert victim not in again.nodes
    done = finished(compat_daemon, job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    assert done.restarts[0].cause == jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE and victim in done.excluded_nodes
    # Found by the ranks' heartbeats and a probe of the node's slurmd (its address and port from the
    # release's node records), not by Slurm after SlurmdTimeout.
    assert done.restarts[0].detected_by == "heartbeat+probe", done.restarts[0]
    check_resume(stack, name, done, victim, EVERY, TOTAL, exact_restart_step=False)
