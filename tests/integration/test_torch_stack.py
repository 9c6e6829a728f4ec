"""examples/train_torch.py on the real stack: torchrun under srun on 2 nodes x 2 processes, a node
killed, the job requeued by clusterd and resumed at another world size from its newest checkpoint.

The batch script is docs/torch.md's torchrun launch; the restarted run starts one process per node
(``SLURM_RESTART_COUNT``), so the DDP state saved by 4 ranks is restored by 2.
"""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.training import finished, log_of
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

STEPS, EVERY = 120, 10
SCRIPT = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
procs=$(( ${{SLURM_RESTART_COUNT:-0}} > 0 ? 1 : 2 ))  # the resumed run: another world size
srun torchrun --nnodes="$SLURM_NNODES" --nproc-per-node="$procs" \\
    --rdzv-backend=c10d --rdzv-endpoint="$head:29511" --rdzv-id="$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}" \\
    {examples}/train_torch.py --parallel ddp --steps {steps} --save-every {every} --sleep 0.1
"""


@pytest.fixture(scope="module")
def torch_in_jobs(stack: Stack) -> None:
    python = stack.dir / "jobenv" / "bin" / "python"
    if subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0:
        pytest.skip("the stack's job environment has no torch (no CPU wheel on this machine)")


def test_torchrun_job_loses_a_node_and_resumes_at_another_world_size(
    torch_in_jobs: None, daemon: Daemon, stack: Stack, killed_nodes: list[str]
) -> None:
    name = f"torch-{uuid.uuid4().hex[:6]}"
    script = SCRIPT.format(examples=stack.env["CLUSTERCTL_EXAMPLES"], steps=STEPS, every=EVERY)
    env = {k: v for k, v in stack.env.items() if k.startswith("AWS_")}
    spec = jobs_pb2.JobSpec(
        name=name, script=script, environment=env, checkpoint_uri=f"s3://{stack.env['CLUSTERCTL_BUCKET']}/tests/{name}"
    )
    client = daemon.client("alice")
    job = client.submit(spec).job
    try:
        running = wait_for(
            lambda: (j := client.get(job.job_id)).checkpoint_step >= 2 * EVERY - 1 and j,
            timeout=180,
            what="a committed checkpoint",
        )
        victim = running.nodes[-1]
        killed_nodes.append(victim)
        stack.stack_sh("kill-node", victim)
        done = finished(daemon, job.job_id, timeout=300)
        assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
        assert [r.cause for r in done.restarts] == [jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE], done.restarts
        text = log_of(stack, name, job.job_id)
        resumed = re.findall(r"RESUMED from step (\d+) rank (\d+)/(\d+)", text)
        assert sorted(int(r) for _, r, _ in resumed) == [0, 1], text[-2000:]
        assert {(int(s), int(w)) for s, _, w in resumed} == {(done.restarts[0].checkpoint_step, 2)}, text[-2000:]
        assert done.restarts[0].checkpoint_step >= 2 * EVERY - 1
        assert f"DONE {STEPS} steps" in text
    finally:
        client.cancel(job.job_id)
