"""TopologyPlacer at submission: -N MIN-MAX is feasible when MIN fits (never pinned to a node count
or list); a request shape is planned once per snapshot."""

from __future__ import annotations

import pytest

import clusterd.placement
from clusterd.errors import InvalidArgument
from clusterd.placement import TopologyPlacer
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.request import JobRequest
from clusterd.supervisor.cache import QueueCache
from clusterd.topology.demand import Preference


async def placer() -> TopologyPlacer:
    cache = QueueCache(FakeSlurm.cluster(leaves=2, per_leaf=3), interval=3600)
    await cache.poll_once()
    return TopologyPlacer(cache)


def job(nodes: int | None, max_nodes: int | None, **fields: object) -> JobRequest:
    return JobRequest(script="#!/bin/bash\n", name="x", user="alice", nodes=nodes, max_nodes=max_nodes, **fields)  # type: ignore[arg-type]


async def test_a_range_whose_max_does_not_fit_is_accepted_when_its_min_does() -> None:
    planned, explanation = (await placer())(job(2, 10), Preference())
    assert (planned.nodes, planned.max_nodes, planned.nodelist) == (2, 10, ())
    assert "Note" not in explanation


async def test_a_range_whose_min_does_not_fit_names_spec_nodes() -> None:
    with pytest.raises(InvalidArgument) as err:
        (await placer())(job(7, 8), Preference())
    assert err.value.field == "spec.nodes"


async def test_tasks_per_node_with_a_range_is_explained() -> None:
    _, explanation = (await placer())(job(2, 3, tasks_per_node=1), Preference())
    assert "starts it on 2 nodes even when 3 are free" in explanation
    _, explicit = (await placer())(job(2, 3, tasks_per_node=1, ntasks=3), Preference())
    assert "Note" not in explicit


async def test_an_infeasible_script_nodelist_names_spec_script() -> None:
    with pytest.raises(InvalidArgument) as err:  # the #SBATCH --nodelist node has too few CPUs
        (await placer())(job(1, None, nodelist=("node1",), cpus_per_task=100000), Preference())
    assert err.value.field == "spec.script"


async def test_a_nodelist_without_a_node_count_is_a_job_of_that_many_nodes() -> None:
    """sbatch -w node1,node2 (no -N): slurmctld raises the node count to the list's size."""
    p = await placer()
    planned, _ = p(job(None, None, nodelist=("node1", "node4")), Preference())
    assert (planned.nodes, planned.nodelist) == (None, ("node1", "node4"))
    planned, _ = p(job(None, None), Preference(nodelist=("node1", "node2", "node3")))
    assert planned.nodelist == ("node1", "node2", "node3")
    planned, _ = p(job(1, 3, nodelist=("node1", "node2")), Preference())
    assert planned.nodelist == ("node1", "node2")
    with pytest.raises(InvalidArgument, match="nodelist names 2 nodes but the job asks for 1") as err:
        p(job(1, None, nodelist=("node1", "node2")), Preference())  # -N 1 is at most 1: Slurm refuses it too
    assert err.value.field == "spec.script"


async def test_a_shape_is_planned_once_per_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    p = await placer()
    planned: list[object] = []
    real = clusterd.placement.plan

    def counting(model: object, request: object) -> object:
        planned.append(request)
        return real(model, request)  # type: ignore[arg-type]

    monkeypatch.setattr(clusterd.placement, "plan", counting)
    pref = Preference()
    first = p(job(2, None), pref)
    assert p(job(2, None), pref) == first and len(planned) == 1  # the same shape: remembered
    p(job(3, None), pref)
    assert len(planned) == 2  # another shape: planned
    await p._cache.poll_once()  # a new snapshot: node states may have changed
    assert p(job(2, None), pref) == first and len(planned) == 3
    with pytest.raises(InvalidArgument):
        p(job(7, None), pref)
    with pytest.raises(InvalidArgument):
        p(job(7, None), pref)
