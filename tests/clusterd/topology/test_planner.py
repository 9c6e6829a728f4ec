"""Planner on hand-made and synthetic trees: best fit, fewest leaves, refusals with reasons."""

from __future__ import annotations

import dataclasses

import pytest

from clusterd.slurm.request import slurm_time
from clusterd.slurm.types import NodeState
from clusterd.topology import IMPLICIT_LEAF, InvalidPlacementRequest, PlacementRequest, TopologyModel, plan
from clusterd.topology.synth import synthetic_cluster

from .helpers import tree


def two_leaves() -> TopologyModel:
    # leaf1 partly busy (2 of 4 free), leaf2 empty.
    return tree({"leaf1": ("spine", 2, 2), "leaf2": ("spine", 4, 0)})


def test_partly_used_leaf_preferred_when_it_fits() -> None:
    p = plan(two_leaves(), PlacementRequest(nodes=2, gpus_per_node=8))
    assert p.feasible and p.available_now
    assert p.switches == ["leaf1"] and p.nodes == ["leaf1n1", "leaf1n2"]
    assert p.spine_hops == 0
    assert p.sbatch_args == ["--switches=1@5:00"]
    assert p.explanation.startswith("2 nodes on leaf1: 1 switch, 0 spine hops; leaf2 (4 free) left for larger jobs")


def test_example_sentence() -> None:
    p = plan(two_leaves(), PlacementRequest(nodes=4, gpus_per_node=8))
    assert p.switches == ["leaf2"]
    assert p.explanation.startswith("4 nodes on leaf2: 1 switch, 0 spine hops; leaf1 has 2 free nodes")


def test_pack_not_available_now_explains_the_wait_and_fallback() -> None:
    m = tree({"leaf1": ("spine", 2, 2), "leaf2": ("spine", 2, 2)})
    p = plan(m, PlacementRequest(nodes=3, gpus_per_node=8, max_wait_seconds=120))
    assert p.feasible and not p.available_now
    assert p.sbatch_args == ["--switches=1@2:00"]
    assert len(p.nodes) == 3 and p.switches == ["leaf1", "leaf2"] and p.spine_hops == 1
    assert "no leaf switch has 3 free nodes now" in p.explanation
    assert "holds the job up to 2:00" in p.explanation


def test_any_policy_has_no_switch_option_and_spans() -> None:
    m = tree({"leaf1": ("spine", 2, 2), "leaf2": ("spine", 2, 2)})
    p = plan(m, PlacementRequest(nodes=3, gpus_per_node=8, policy="any"))
    assert p.available_now and p.sbatch_args == []
    assert p.common_switch == "spine"


def test_spanning_job_uses_fewest_leaves_then_lowest_switch() -> None:
    m = tree(
        {
            # spine1: 40 free but in four pieces of 10
            "l1": ("spine1", 10, 6),
            "l2": ("spine1", 10, 6),
            "l3": ("spine1", 10, 6),
            "l4": ("spine1", 10, 6),
            # spine2: 24 free in two pieces
            "l5": ("spine2", 16, 0),
            "l6": ("spine2", 8, 8),
            "l7": ("spine2", 0, 16),
            "l8": ("spine2", 0, 16),
        }
    )
    p = plan(m, PlacementRequest(nodes=24, gpus_per_node=8, policy="any"))
    assert sorted(p.switches) == ["l5", "l6"]
    assert p.common_switch == "spine2" and p.spine_hops == 1
    # The fuller leaf is drained first, the roomier takes the rest.
    assert p.switches == ["l6", "l5"]


def test_fewer_leaves_beat_a_lower_common_switch() -> None:
    m = tree(
        {
            "l1": ("spine1", 5, 11),
            "l2": ("spine1", 5, 11),
            "l3": ("spine1", 5, 11),
            "l4": ("spine2", 8, 8),
            "l5": ("spine3", 8, 8),
        }
    )
    p = plan(m, PlacementRequest(nodes=15, gpus_per_node=8, policy="any"))
    assert sorted(p.switches) == ["l4", "l5"] and p.common_switch == "core" and p.spine_hops == 2


def test_same_leaf_count_prefers_lower_common_switch() -> None:
    m = tree({"l1": ("spine1", 6, 0), "l2": ("spine1", 6, 0), "l3": ("spine2", 7, 0), "l4": ("spine3", 7, 0)})
    p = plan(m, PlacementRequest(nodes=12, gpus_per_node=8, policy="any"))
    assert sorted(p.switches) == ["l1", "l2"] and p.spine_hops == 1


def test_best_fit_keeps_the_empty_leaf_whole() -> None:
    m = tree({"l1": ("s", 16, 0), "l2": ("s", 12, 4), "l3": ("s", 10, 6), "l4": ("s", 9, 7)})
    p = plan(m, PlacementRequest(nodes=20, gpus_per_node=8, policy="any"))
    assert sorted(p.switches) == ["l2", "l4"]
    assert "l1" not in p.switches


def test_partly_used_nodes_first_within_a_leaf() -> None:
    m = tree({"leaf1": (None, 3, 0)})
    n2 = m.node("leaf1n2")
    m = m.with_nodes([dataclasses.replace(n2, state=NodeState.MIXED, gpus_allocated=4, cpus_allocated=8)])
    p = plan(m, PlacementRequest(nodes=1, gpus_per_node=2))
    assert p.nodes == ["leaf1n2"] and p.sbatch_args == []


def test_down_drain_and_excluded_never_chosen() -> None:
    m = tree({"leaf1": ("s", 6, 0), "leaf2": ("s", 6, 0)})
    updated = [
        dataclasses.replace(m.node("leaf1n1"), state=NodeState.DOWN),
        dataclasses.replace(m.node("leaf1n2"), state=NodeState.DRAINING),
        dataclasses.replace(m.node("leaf1n3"), state=NodeState.DRAINED),
        dataclasses.replace(m.node("leaf1n4"), flags=("DRAIN",)),
    ]
    m = m.with_nodes(updated)
    p = plan(m, PlacementRequest(nodes=6, gpus_per_node=8, policy="any", exclude_nodes=("leaf2n[1-2]",)))
    bad = {"leaf1n1", "leaf1n2", "leaf1n3", "leaf1n4", "leaf2n1", "leaf2n2"}
    assert p.available_now and len(p.nodes) == 6 and not bad & set(p.nodes)
    assert p.sbatch_args == ["--exclude=leaf2n[1-2]"]  # down nodes are not excluded explicitly
    refused = plan(m, PlacementRequest(nodes=7, gpus_per_node=8, exclude_nodes=("leaf2n[1-2]",)))
    assert not refused.feasible
    why = "needs 7 nodes; the cluster has 6 that fit (4 down/draining/drained, 2 excluded of 12)"
    assert why in refused.explanation


def test_nodelist_is_passed_and_used() -> None:
    m = tree({"leaf1": ("s", 4, 0), "leaf2": ("s", 4, 0)})
    p = plan(m, PlacementRequest(nodes=3, gpus_per_node=8, nodelist=("leaf2n4",)))
    assert p.available_now and p.nodes[0] == "leaf2n4" and p.switches == ["leaf2"]
    assert p.sbatch_args == ["--switches=1@5:00", "--nodelist=leaf2n4"]


def test_nodelist_busy_queues() -> None:
    m = tree({"leaf1": ("s", 1, 1)})
    p = plan(m, PlacementRequest(nodes=1, gpus_per_node=8, nodelist=("leaf1n2",)))
    assert p.feasible and not p.available_now and "busy now (leaf1n2)" in p.explanation


@pytest.mark.parametrize(
    ("request_", "needle"),
    [
        (PlacementRequest(nodes=9, gpus_per_node=8), "needs 9 nodes; the cluster has 8 that fit"),
        (PlacementRequest(nodes=1, gpus_per_node=16), "no usable node in the cluster has 16 GPUs (most: 8)"),
        (PlacementRequest(nodes=1, cpus_per_node=64), "no usable node in the cluster has 64 CPUs (most: 32)"),
        (PlacementRequest(nodes=1, partition="cpu"), "partition 'cpu' has no nodes"),
        (PlacementRequest(nodes=2, nodelist=("leaf1n1", "nope")), "nodelist has unknown nodes nope"),
        (PlacementRequest(nodes=1, nodelist=("leaf1n[1-2]",)), "nodelist names 2 nodes but the job asks for 1"),
        (
            PlacementRequest(nodes=2, nodelist=("leaf1n1",), exclude_nodes=("leaf1n1",)),
            "nodelist and exclude both name leaf1n1",
        ),
        (
            PlacementRequest(nodes=6, gpus_per_node=8, policy="exact", switch_count=1),
            "6 nodes need at least 2 leaf switches even on an empty cluster; 1 requested",
        ),
    ],
)
def test_infeasible_requests_say_what_does_not_fit(request_: PlacementRequest, needle: str) -> None:
    m = tree({"leaf1": ("s", 2, 2), "leaf2": ("s", 4, 0)})
    p = plan(m, request_)
    assert not p.feasible and not p.available_now and p.nodes == [] and p.sbatch_args == []
    assert p.explanation.startswith("cannot place ")
    assert needle in p.explanation


def test_nodelist_with_down_node_is_infeasible() -> None:
    m = tree({"leaf1": ("s", 4, 0)})
    m = m.with_nodes([dataclasses.replace(m.node("leaf1n2"), state=NodeState.DOWN)])
    p = plan(m, PlacementRequest(nodes=2, nodelist=("leaf1n[1-2]",)))
    assert not p.feasible and "nodelist node leaf1n2 is down" in p.explanation


def test_pack_beyond_one_leaf_asks_for_the_minimum() -> None:
    m = tree({"leaf1": ("s", 4, 0), "leaf2": ("s", 4, 0), "leaf3": ("s", 4, 0)})
    p = plan(m, PlacementRequest(nodes=6, gpus_per_node=8))
    assert p.feasible and p.available_now and p.min_switches == 2
    assert p.sbatch_args == ["--switches=2@5:00"] and len(p.switches) == 2
    assert "--switches asks for the minimum, 2" in p.explanation


def test_exact_policy() -> None:
    m = tree({"leaf1": ("s", 4, 0), "leaf2": ("s", 4, 0), "leaf3": ("s", 4, 0)})
    p = plan(m, PlacementRequest(nodes=6, policy="exact", switch_count=3, max_wait_seconds=3600))
    assert p.feasible and p.sbatch_args == ["--switches=3@1:00:00"] and p.switch_limit == 3


def test_single_node_has_no_switch_option() -> None:
    p = plan(two_leaves(), PlacementRequest(nodes=1, gpus_per_node=8))
    assert p.sbatch_args == [] and p.switch_limit is None and p.switches == ["leaf1"]


def test_partition_filter() -> None:
    a = tree({"leaf1": ("s", 4, 0)}, partitions=("gpu",))
    p = plan(a, PlacementRequest(nodes=2, partition="gpu"))
    assert p.available_now
    assert not plan(a, PlacementRequest(nodes=2, partition="debug")).feasible


def test_disjoint_fabrics_cannot_be_combined() -> None:
    m = tree({"leaf1": (None, 4, 0), "leaf2": (None, 4, 0)})  # no common switch
    p = plan(m, PlacementRequest(nodes=6))
    assert not p.feasible and "on one switch fabric; the largest fabric has 4" in p.explanation


def test_without_topology() -> None:
    _, nodes = synthetic_cluster(2, 4, 0, seed=1)
    m = TopologyModel.build([], nodes)
    p = plan(m, PlacementRequest(nodes=2, policy="any"))
    assert p.available_now and p.switches == [IMPLICIT_LEAF] and p.spine_hops == 0


@pytest.mark.parametrize(
    "bad",
    [
        PlacementRequest(nodes=0),
        PlacementRequest(nodes=1, gpus_per_node=-1),
        PlacementRequest(nodes=1, policy="fast"),  # type: ignore[arg-type]
        PlacementRequest(nodes=1, policy="exact"),
        PlacementRequest(nodes=1, max_wait_seconds=-5),
        PlacementRequest(nodes=1, exclude_nodes=("n[1-",)),
    ],
)
def test_malformed_requests_raise(bad: PlacementRequest) -> None:
    with pytest.raises(InvalidPlacementRequest):
        plan(two_leaves(), bad)


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00"), (300, "5:00"), (3661, "1:01:01"), (90061, "1-01:01:01")])
def test_slurm_time(seconds: int, text: str) -> None:
    assert slurm_time(seconds) == text


def test_big_three_level_tree_is_deterministic() -> None:
    switches, nodes = synthetic_cluster(16, 8, 4, seed=11)  # 128 nodes, 3 levels
    m = TopologyModel.build(switches, nodes)
    req = PlacementRequest(nodes=12, gpus_per_node=8, policy="any")
    first = plan(m, req)
    assert first == plan(m, req)
    assert first.available_now and len(first.nodes) == 12
