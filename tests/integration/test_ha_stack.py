"""The local stack's own HA mode, as an operator drives it: `stack.sh up --ha`, then `stack.sh kill-leader`.

scripts/test.sh runs this in its HA phase (the stack switched to --ha after the main suite); on a
stack that is not HA it is skipped. The unit of proof is what a user sees through the env file's
CLUSTERCTL_ADDR (both replicas): submits keep being accepted, a watch keeps going without a gap, a
new leader takes over in seconds, and the killed replica comes back as a follower.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from clusterctl.client import ClusterClient
from clusterctl.v1 import jobs_pb2
from tests.support.replicas import healthz
from tests.support.stack import Stack
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm


def _roles(stack: Stack) -> list[tuple[str, int]]:
    states = [healthz(url) for url in stack.env["CLUSTERCTL_HEALTHZ"].split(",")]
    return [(str(h.get("role", "down")), int(str(h.get("epoch", 0)))) for h in states]


def test_kill_leader_on_the_ha_stack(stack: Stack) -> None:
    if stack.env.get("CLUSTERCTL_HA") != "1":
        pytest.skip("the stack is not in HA mode (deploy/local/stack.sh up --ha; scripts/test.sh's HA phase)")
    client = ClusterClient(stack.env["CLUSTERCTL_ADDR"], stack.tokens["alice"], timeout=5.0)
    assert len(client.addrs) == 2
    before = wait_for(
        lambda: (r := _roles(stack)) and [x for x in r if x[0] == "leader"] and r, timeout=30, what="a leader"
    )
    epoch = max(e for role, e in before if role == "leader")
    tag = f"hastack-{uuid.uuid4().hex[:6]}"
    seen: list[jobs_pb2.JobEvent] = []
    done = threading.Event()

    def watch() -> None:
        for event in client.watch(include_initial=False):
            seen.append(event)
            if done.is_set() and event.job.name == f"{tag}-after":
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(1.0)
    first = client.submit(jobs_pb2.JobSpec(name=f"{tag}-before", command=["true"], hold=True)).job
    stack.stack_sh("kill-leader")
    t0 = time.monotonic()
    done.set()
    second = client.submit(jobs_pb2.JobSpec(name=f"{tag}-after", command=["true"], hold=True)).job
    accepted = time.monotonic() - t0
    assert accepted < 10, accepted
    after = wait_for(
        lambda: (r := _roles(stack)) and any(role == "leader" and e > epoch for role, e in r) and r,
        timeout=15,
        what="a new leader",
    )
    assert sorted(role for role, _ in after) in (["follower", "leader"], ["down", "leader"], ["leader", "not ready"])
    wait_for(
        lambda: sorted(role for role, _ in _roles(stack)) == ["follower", "leader"],
        timeout=30,
        what="the killed replica back as a follower",
    )
    watcher.join(30)
    assert not watcher.is_alive(), "the watch did not see the submit made after the kill"
    names = [e.job.name for e in seen if e.type == jobs_pb2.JOB_EVENT_TYPE_SUBMITTED]
    assert f"{tag}-before" in names and f"{tag}-after" in names, names
    tokens = [int(e.resume_token) for e in seen if e.resume_token]
    assert tokens == sorted(set(tokens)), "events out of order or twice across the failover"
    for job in (first, second):
        client.cancel(job.job_id)
    client.close()
