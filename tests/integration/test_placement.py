"""Topology-aware placement on the real stack (leaf1 = node[1-3], leaf2 = node[4-6])."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from clusterctl.errors import ServiceError
from clusterctl.v1 import cluster_pb2, jobs_pb2
from tests.support.daemon import Daemon
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

LEAF = {f"node{i}": "leaf1" if i <= 3 else "leaf2" for i in range(1, 7)}


@pytest.fixture
def blockers(daemon: Daemon) -> Iterator[list[str]]:
    """Jobs that hold whole nodes busy; cancelled afterwards."""
    ids: list[str] = []
    yield ids
    admin = daemon.client("root")
    for job_id in ids:
        with contextlib.suppress(ServiceError):
            admin.cancel(job_id)
    for job_id in ids:
        wait_for(lambda j=job_id: admin.get(j).terminal, timeout=60, what=f"blocker {job_id} gone")


def occupy(daemon: Daemon, nodes: list[str], ids: list[str]) -> None:
    admin = daemon.client("root")
    for node in nodes:
        spec = jobs_pb2.JobSpec(
            name=f"block-{node}",
            command=["sleep", "600"],
            gpus_per_node=4,
            cpus_per_task=4,
            placement=cluster_pb2.PlacementPreference(nodelist=[node], policy=cluster_pb2.PLACEMENT_POLICY_ANY),
        )
        ids.append(admin.submit(spec).job.job_id)
    for job_id in ids:
        wait_for(lambda j=job_id: admin.get(j).state == jobs_pb2.JOB_STATE_RUNNING, what=f"blocker {job_id} running")
    wait_for(lambda: all(n.gpus_allocated == 4 for n in admin.nodes() if n.name in nodes), what="poll sees blockers")


def test_pack_job_lands_on_one_switch_when_leaf1_is_partly_busy(daemon: Daemon, blockers: list[str]) -> None:
    occupy(daemon, ["node1"], blockers)
    client = daemon.client("alice")
    plan = client.plan(cluster_pb2.PlanPlacementRequest(nodes=2, gpus_per_node=4))
    assert plan.feasible and plan.available_now and len(plan.switches) == 1, plan
    job = client.submit(jobs_pb2.JobSpec(name="pack2", command=["sleep", "3"], nodes=2, gpus_per_node=4)).job
    assert "1 switch" in job.placement_explanation
    running = wait_for(lambda: (j := client.get(job.job_id)).nodes and j, what="pack job placed")
    assert len({LEAF[n] for n in running.nodes}) == 1, running.nodes
    assert "node1" not in running.nodes
    client.cancel(job.job_id)


def test_pack_job_spans_switches_after_max_wait(daemon: Daemon, blockers: list[str]) -> None:
    occupy(daemon, ["node1", "node2", "node4", "node5"], blockers)
    client = daemon.client("alice")
    max_wait = 15
    started = time.monotonic()
    spec = jobs_pb2.JobSpec(
        name="span2",
        command=["sleep", "3"],
        nodes=2,
        gpus_per_node=4,
        placement=cluster_pb2.PlacementPreference(policy=cluster_pb2.PLACEMENT_POLICY_PACK, max_wait_seconds=max_wait),
    )
    job = client.submit(spec).job
    assert "--switches=1@" in job.placement_explanation or "wait" in job.placement_explanation
    early = client.get(job.job_id)
    assert early.state == jobs_pb2.JOB_STATE_PENDING  # waits for one switch first
    running = wait_for(lambda: (j := client.get(job.job_id)).nodes and j, timeout=120, what="span job placed")
    waited = time.monotonic() - started
    assert sorted(running.nodes) == ["node3", "node6"]
    assert waited >= max_wait - 3, waited


def test_infeasible_request_is_refused_not_left_pending(daemon: Daemon) -> None:
    client = daemon.client("alice")
    for spec, field in (
        (jobs_pb2.JobSpec(command=["true"], nodes=7, gpus_per_node=1), "spec.nodes"),
        (jobs_pb2.JobSpec(command=["true"], nodes=1, gpus_per_node=8), "spec.gpus_per_node"),
        (
            jobs_pb2.JobSpec(
                command=["true"],
                nodes=4,
                placement=cluster_pb2.PlacementPreference(policy=cluster_pb2.PLACEMENT_POLICY_EXACT, switch_count=1),
            ),
            "spec.placement.switch_count",
        ),
    ):
        with pytest.raises(ServiceError) as info:
            client.submit(spec)
        assert info.value.code_name == "INVALID_ARGUMENT" and field in info.value.message, info.value
    plan = client.plan(cluster_pb2.PlanPlacementRequest(nodes=7))
    assert not plan.feasible and plan.explanation


def test_topology_view_matches_slurm(daemon: Daemon) -> None:
    topo = daemon.client("alice").topology()
    leaves = {s.name: sorted(s.nodes) for s in topo.switches if s.level == 0}
    assert leaves == {"leaf1": ["node1", "node2", "node3"], "leaf2": ["node4", "node5", "node6"]}
    assert list(topo.roots) == ["spine"]
    assert all(n.gpus_total == 4 for n in topo.nodes)
