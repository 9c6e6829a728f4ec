"""A tenant's job attacks liveness detection on the real stack and takes nothing away from others.

Alice's job shares a node with Bob's. It beats, tries to speak for Bob's job and for 65,536 ranks,
then falls silent while it holds thousands of connections to its node's slurmd (a full listen
queue makes a TCP connect probe time out). The node must stay in service, Bob's job must keep
running untouched, and only Alice's job is restarted (as hung). An administrator's hold on a job
cannot be lifted by its user through clusterd.
"""

from __future__ import annotations

import json
import textwrap
import time
import uuid

import pytest
from google.protobuf.duration_pb2 import Duration

from clusterctl.errors import ServiceError
from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

HANG = 4  # seconds: the attacker's hang timeout
ATTACK = textwrap.dedent("""
    import json, os, resource, socket, sys, time
    import grpc
    from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
    env = os.environ
    stub = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(env["CLUSTERCTL_HEARTBEAT_ADDR"]))
    mine = dict(record_id=int(env["CLUSTERCTL_RECORD_ID"]), token=env["CLUSTERCTL_HEARTBEAT_TOKEN"],
                job_id=env["SLURM_JOB_ID"], restart_count=int(env.get("SLURM_RESTART_COUNT") or 0),
                node=env["SLURMD_NODENAME"], pid=os.getpid())
    def beat(**fields):
        try:
            stub.Heartbeat(jobs_pb2.HeartbeatRequest(**{**mine, **fields}), timeout=5)
            return "OK"
        except grpc.RpcError as exc:
            return exc.code().name
    said = {"own": [beat(rank=0, world_size=1, step=s) for s in range(3)]}
    time.sleep(3)  # (beats before clusterd's poll saw the job running are not recorded; it polls again soon)
    said["own"].append(beat(rank=0, world_size=1, step=3))
    said["other_job"] = beat(rank=0, world_size=1, job_id=env["VICTIM_JOB"], node=env["VICTIM_NODE"])
    said["other_node"] = beat(rank=0, world_size=1, node=env["OTHER_NODE"])
    said["ranks"] = beat(rank=65535, world_size=65536)
    print("SAID " + json.dumps(said), flush=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = []
    for _ in range(min(hard - 64, 5000)):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex((env["NODE_ADDR"], 6818))
        held.append(s)
    print(f"HELD {len(held)}", flush=True)
    time.sleep(300)
""")


def node_state(stack: Stack, node: str) -> str:
    out = stack.run("scontrol", "show", "node", node, "-o").stdout
    return next(f.split("=", 1)[1] for f in out.split() if f.startswith("State="))


def node_addr(stack: Stack, node: str) -> str:
    out = stack.run("scontrol", "show", "node", node, "-o").stdout
    return next(f.split("=", 1)[1] for f in out.split() if f.startswith("NodeAddr="))


def test_a_silent_job_flooding_slurmd_takes_no_node_from_others(daemon: Daemon, stack: Stack) -> None:
    alice, bob = daemon.client("alice"), daemon.client("bob")
    victim = bob.submit(jobs_pb2.JobSpec(name=f"victim-{uuid.uuid4().hex[:6]}", command=["sleep", "300"])).job
    try:
        running = wait_for(
            lambda: (j := bob.get(victim.job_id)).state == jobs_pb2.JOB_STATE_RUNNING and j,
            timeout=60,
            what="the victim running",
        )
        (node,) = running.nodes
        other = next(n for n in ("node1", "node2", "node3") if n != node)
        policy = jobs_pb2.RestartPolicy(
            heartbeat_interval=Duration(nanos=500_000_000), hang_timeout=Duration(seconds=HANG), max_restarts=1
        )
        env = {
            "VICTIM_JOB": victim.job_id,
            "VICTIM_NODE": node,
            "OTHER_NODE": other,
            "NODE_ADDR": node_addr(stack, node),
        }
        script = f"#!/bin/bash\n#SBATCH --nodes=1 --ntasks=1 --nodelist={node}\npython3 - <<'EOF'\n{ATTACK}EOF\n"
        name = f"attack-{uuid.uuid4().hex[:6]}"
        attack = alice.submit(jobs_pb2.JobSpec(name=name, script=script, environment=env, restart_policy=policy)).job
        try:
            said = wait_for(lambda: _said(daemon, attack.job_id), timeout=90, what="the attack's report")
            assert said["own"] == ["OK"] * 4, said
            assert said["other_job"] == "PERMISSION_DENIED", said
            assert said["other_node"] == "PERMISSION_DENIED", said
            assert said["ranks"] == "INVALID_ARGUMENT", said
            # Silent with its node's slurmd flooded: watch until the attacker is restarted as hung.
            deadline = time.monotonic() + 60
            states = set()
            while time.monotonic() < deadline:
                states.add(node_state(stack, node))
                job = alice.get(attack.job_id)
                if job.restarts:
                    break
                time.sleep(0.5)
            assert job.restarts, "the silent job was never restarted"
            assert job.restarts[0].cause == jobs_pb2.TERMINATION_CAUSE_RANK_HUNG, job.restarts[0]
            assert not job.restarts[0].failed_nodes and not job.excluded_nodes
            states.add(node_state(stack, node))
            assert not any(s.startswith(("DOWN", "DRAIN")) for s in states), states
            theirs = bob.get(victim.job_id)
            assert theirs.state == jobs_pb2.JOB_STATE_RUNNING and not theirs.restarts, theirs
        finally:
            alice.cancel(attack.job_id)
    finally:
        bob.cancel(victim.job_id)


def _said(daemon: Daemon, job_id: str) -> dict[str, object] | None:
    try:
        text = b"".join(c.data for c in daemon.client("alice").read_log(job_id)).decode(errors="replace")
    except ServiceError:
        return None
    for line in text.splitlines():
        if line.startswith("SAID "):
            return json.loads(line[5:])  # type: ignore[no-any-return]
    return None


def test_release_cannot_lift_an_administrators_hold(daemon: Daemon, stack: Stack) -> None:
    alice = daemon.client("alice")
    job = alice.submit(jobs_pb2.JobSpec(name=f"held-{uuid.uuid4().hex[:6]}", command=["true"], hold=True)).job
    try:
        stack.run("scontrol", "hold", job.job_id)  # root: an administrator's hold
        with pytest.raises(ServiceError) as err:
            alice.release(job.job_id)
        assert err.value.code_name == "FAILED_PRECONDITION", err.value
        out = stack.run("scontrol", "show", "job", job.job_id, "-o").stdout
        assert "Reason=JobHeldAdmin" in out and "Priority=0" in out, out
    finally:
        alice.cancel(job.job_id)
