"""``--checkpoint-tier memory`` on the real stack: a 2-node job whose checkpoints keep committing into
its nodes' memory tiers while S3 is frozen (SeaweedFS stopped with SIGSTOP), then reach S3 once it
thaws; another user on a job's node cannot read its shards from a tier without the job's secret; and
a job with a spare node that loses a rank node while S3 is frozen resumes in place from its newest
step, read from the survivors' memory, and that step reaches S3 once it thaws.

The job's training program is unchanged by the tier: it makes a plain ``CheckpointManager(uri)``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from clusterctl.checkpoint import CheckpointManager
from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.training import finished, log_of
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

PROGRAM = """import os, sys, time
import torch
from clusterctl.checkpoint import CheckpointConfig, CheckpointManager

uri, thawed_flag = sys.argv[1], sys.argv[2]
rank = int(os.environ["SLURM_PROCID"])
torch.manual_seed(rank)
net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 4))
opt = torch.optim.AdamW(net.parameters())
config = CheckpointConfig(commit_timeout=60, poll_initial=0.02, poll_max=0.2, gc_on_commit=False)
with CheckpointManager(uri, config=config, keep=0) as ckpt:
    state = {"m": net, "o": opt}
    ckpt.save(0, state).result()
    ckpt.wait_durable(0, timeout=60)
    tiers, job = os.environ["CLUSTERCTL_TIER_PEERS"], os.environ["CLUSTERCTL_TIER_JOB"]
    print(f"READY rank {rank} tier {ckpt._tier is not None} at {tiers} job {job}", flush=True)
    while not os.path.exists(thawed_flag + ".frozen"):
        time.sleep(0.05)
    for step in (1, 2, 3):
        net(torch.randn(8, 64)).sum().backward()
        opt.step()
        print(f"COMMITTED {step} rank {rank} {ckpt.save(step, state).result().committed}", flush=True)
    ckpt.wait_durable(timeout=120)
    print(f"DURABLE {ckpt.durable_steps()} rank {rank}", flush=True)
"""
SCRIPT = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
srun python3 {program} {uri} {flag}
"""
# Bob, on a node of alice's job, dials its tier with the job's name but not its secret.
ATTACK = """import secrets, sys
from clusterctl.tier.client import TierClient
from clusterctl.tier.errors import TierAuthError
try:
    TierClient(sys.argv[1], secret=secrets.token_bytes(32), job=sys.argv[2], timeout=10).list("", "")
except TierAuthError as exc:
    print("REFUSED", exc)
else:
    print("READ")
"""


def _lines(stack: Stack, name: str, job_id: str, word: str) -> list[str]:
    try:
        return [line for line in log_of(stack, name, job_id).splitlines() if line.startswith(word)]
    except FileNotFoundError:
        return []


def _as_bob_on(stack: Stack, node: str, code: str, *args: str) -> str:
    python = str(stack.dir / "jobenv" / "bin" / "python")
    argv = ["ip", "netns", "exec", stack.netns(node), "setpriv", "--reuid=bob", "--regid=bob", "--clear-groups"]
    done = subprocess.run([*argv, "--", python, "-c", code, *args], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def _tier_pids(job_id: str) -> list[int]:
    """The job's tier processes (python -m clusterctl.tier.allocation serve, not their srun)."""
    found = []
    for proc in Path("/proc").iterdir():
        argv = _cmdline(proc).split("\0")
        if proc.name.isdigit() and argv[1:3] == ["-m", "clusterctl.tier.allocation"] and "serve" in argv:
            try:
                if _environ(int(proc.name)).get("SLURM_JOB_ID") == job_id:
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def test_saves_commit_in_memory_while_s3_is_frozen_and_reach_it_after(
    daemon: Daemon, stack: Stack, alice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"tier-{uuid.uuid4().hex[:6]}"
    uri = f"s3://{stack.env['CLUSTERCTL_BUCKET']}/tests/{name}"
    program, flag = alice_dir / "tier_job.py", alice_dir / "thawed"
    program.write_text(PROGRAM)
    env = {k: v for k, v in stack.env.items() if k.startswith("AWS_")}
    spec = jobs_pb2.JobSpec(
        name=name,
        script=SCRIPT.format(program=program, uri=uri, flag=flag),
        environment=env,
        checkpoint_tier="memory",
        time_limit="5",
    )
    client = daemon.client("alice")
    job = client.submit(spec).job
    weed = int((stack.dir / "run" / "weed.pid").read_text())
    try:
        assert client.get(job.job_id).spec.checkpoint_tier == "memory"
        ready = wait_for(lambda: len(r := _lines(stack, name, job.job_id, "READY")) == 2 and r, 120, what="2 ranks")
        assert all(" tier True " in line for line in ready), ready  # the plain manager took the job's tier
        tier_job = ready[0].split()[-1]
        nodes = client.get(job.job_id).nodes
        assert len(nodes) == 2

        address = next(a for a in ready[0].split()[-3].split(",") if a.startswith(f"{nodes[0]}:"))
        out = _as_bob_on(stack, nodes[0], ATTACK, address, tier_job)
        assert out.startswith("REFUSED"), out
        tiers = _tier_pids(job.job_id)
        assert len(tiers) == 2, tiers  # one per node
        secret = _environ(tiers[0])["CLUSTERCTL_TIER_SECRET"]
        assert not any(secret in _cmdline(p) for p in Path("/proc").iterdir() if p.name.isdigit())  # never in argv
        out = _as_bob_on(stack, nodes[0], "import sys; open(sys.argv[1]).read()", f"/proc/{tiers[0]}/environ")
        assert "PermissionError" in out, out

        os.kill(weed, signal.SIGSTOP)
        try:
            Path(str(flag) + ".frozen").touch()
            committed = wait_for(
                lambda: len(c := _lines(stack, name, job.job_id, "COMMITTED")) == 6 and c, 60, what="commits in memory"
            )
            assert all(line.endswith(" True") for line in committed), committed
        finally:
            os.kill(weed, signal.SIGCONT)
        done = finished(daemon, job.job_id, timeout=180)
        text = log_of(stack, name, job.job_id)
        assert done.state == jobs_pb2.JOB_STATE_COMPLETED, text[-3000:]
        assert "Traceback" not in text and "Killed" not in text, text[-3000:]  # the tiers stopped cleanly
        durable = sorted(_lines(stack, name, job.job_id, "DURABLE"))
        assert durable == [f"DURABLE [0, 1, 2, 3] rank {r}" for r in (0, 1)], durable
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("CLUSTERCTL_CHECKPOINT_TIER", raising=False)
        with CheckpointManager(uri, rank=0, world_size=1) as listing:
            assert listing.durable_steps() == [0, 1, 2, 3]
        assert not re.search(r"[0-9a-f]{64}", str(client.get(job.job_id)))  # no secret in GetJob
    finally:
        os.kill(weed, signal.SIGCONT)
        client.cancel(job.job_id)


# Saves steps 1-3 with S3 frozen from the start, then waits for its node to die. Relaunched in place
# (CLUSTERCTL_RELAUNCH > 0) it restores the newest step (from memory: S3 holds none), proves the
# weights are those it saved, and once S3 thaws waits for every step to reach it.
SPARE_PROGRAM = """import os, sys, time
import torch
from clusterctl.checkpoint import CheckpointConfig, CheckpointManager

uri, flag = sys.argv[1], sys.argv[2]
rank, node = int(os.environ["SLURM_PROCID"]), os.environ["SLURMD_NODENAME"]
relaunch = int(os.environ.get("CLUSTERCTL_RELAUNCH", "0"))
torch.manual_seed(rank)
net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 4))
opt = torch.optim.AdamW(net.parameters())
state = {"m": net, "o": opt}
config = CheckpointConfig(commit_timeout=60, poll_initial=0.02, poll_max=0.2, gc_on_commit=False)

def fingerprint():
    return sum(float(p.detach().double().sum()) for p in net.parameters())

print(f"UP rank {rank} node {node} relaunch {relaunch}", flush=True)
while not os.path.exists(flag + ".frozen"):
    time.sleep(0.05)
with CheckpointManager(uri, config=config, keep=0) as ckpt:
    if relaunch == 0:
        for step in (1, 2, 3):
            net(torch.randn(8, 64)).sum().backward()
            opt.step()
            committed = ckpt.save(step, state).result().committed
            print(f"COMMITTED {step} rank {rank} {committed} {fingerprint():.9e}", flush=True)
        time.sleep(600)  # until a node dies
    step = ckpt.restore(into=state)
    print(f"RESTORED {step} rank {rank} node {node} {fingerprint():.9e}", flush=True)
    while not os.path.exists(flag + ".thawed"):
        time.sleep(0.05)
    ckpt.wait_durable(step, timeout=120)
    print(f"DURABLE {ckpt.durable_steps()} rank {rank}", flush=True)
"""


def test_a_node_death_with_s3_frozen_resumes_in_place_from_peer_memory(
    daemon: Daemon, stack: Stack, alice_dir: Path, killed_nodes: list[str]
) -> None:
    name = f"tierspare-{uuid.uuid4().hex[:6]}"
    uri = f"s3://{stack.env['CLUSTERCTL_BUCKET']}/tests/{name}"
    program, flag = alice_dir / "tier_spare_job.py", alice_dir / "s3"
    program.write_text(SPARE_PROGRAM)
    spec = jobs_pb2.JobSpec(
        name=name,
        script=SCRIPT.format(program=program, uri=uri, flag=flag),
        environment={k: v for k, v in stack.env.items() if k.startswith("AWS_")},
        checkpoint_tier="memory",
        spare_nodes=1,
        time_limit="5",
    )
    client = daemon.client("alice")
    job = client.submit(spec).job
    weed = int((stack.dir / "run" / "weed.pid").read_text())
    try:
        up = wait_for(lambda: len(u := _lines(stack, name, job.job_id, "UP")) == 2 and u, 120, what="2 ranks")
        ranks = {int(line.split()[2]): line.split()[4] for line in up}
        batch = re.search(r"\bBatchHost=(\S+)", stack.run("scontrol", "show", "job", "-o", job.job_id).stdout)
        assert batch, job.job_id
        victim = next(n for n in sorted(ranks.values()) if n != batch.group(1))
        os.kill(weed, signal.SIGSTOP)  # before anything reaches S3: every step lives in memory only
        Path(str(flag) + ".frozen").touch()
        committed = wait_for(
            lambda: len(c := _lines(stack, name, job.job_id, "COMMITTED")) == 6 and c, 60, what="commits in memory"
        )
        assert all(line.split()[4] == "True" for line in committed), committed
        saved = {int(line.split()[3]): line.split()[5] for line in committed if line.startswith("COMMITTED 3 ")}

        killed_nodes.append(victim)
        stack.stack_sh("kill-node", victim)
        restored = wait_for(
            lambda: len(r := _lines(stack, name, job.job_id, "RESTORED")) == 2 and r, 60, what="the in-place resume"
        )
        # Step 3, with S3 still frozen: it came out of the survivors' memory, with the weights saved.
        assert {int(line.split()[3]): (line.split()[1], line.split()[-1]) for line in restored} == {
            r: ("3", fp) for r, fp in saved.items()
        }, restored
        assert victim not in {line.split()[5] for line in restored}, restored
        os.kill(weed, signal.SIGCONT)
        Path(str(flag) + ".thawed").touch()
        done = finished(daemon, job.job_id, timeout=120)
        text = log_of(stack, name, job.job_id)
        assert done.state == jobs_pb2.JOB_STATE_COMPLETED and done.restart_count == 0, text[-3000:]
        assert done.restarts and done.restarts[0].detail.startswith("in place"), done.restarts
        durable = sorted(_lines(stack, name, job.job_id, "DURABLE"))
        assert durable == [f"DURABLE [1, 2, 3] rank {r}" for r in (0, 1)], durable
    finally:
        os.kill(weed, signal.SIGCONT)
        client.cancel(job.job_id)
