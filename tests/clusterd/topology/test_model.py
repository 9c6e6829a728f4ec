"""Model sums, leaves, common switches and the implicit leaf."""

from __future__ import annotations

from clusterd.slurm.types import NodeState, SlurmNode, SlurmSwitch
from clusterd.topology import IMPLICIT_LEAF, TopologyModel, parse_topology
from clusterd.topology.model import schedulable
from clusterd.topology.synth import synthetic_cluster

TEXT = """\
SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n[3-4]
SwitchName=leaf3 Level=0 LinkSpeed=1 Nodes=n[5-6]
SwitchName=spine1 Level=1 LinkSpeed=1 Switches=leaf[1-2]
SwitchName=spine2 Level=1 LinkSpeed=1 Switches=leaf3
SwitchName=core Level=2 LinkSpeed=1 Switches=spine[1-2]
"""


def node(name: str, state: NodeState = NodeState.IDLE, gpus: int = 0, *, flags: tuple[str, ...] = ()) -> SlurmNode:
    return SlurmNode(
        name, state, cpus_total=8, cpus_allocated=2 if gpus else 0, gpus_total=4, gpus_allocated=gpus, flags=flags
    )


def model() -> TopologyModel:
    nodes = [
        node("n1"),
        node("n2", NodeState.MIXED, 1),
        node("n3", NodeState.ALLOCATED, 4),
        node("n4", NodeState.DOWN),
        node("n5", NodeState.IDLE, flags=("DRAIN",)),
        node("n6"),
    ]
    return TopologyModel.build(parse_topology(TEXT), nodes)


def test_structure() -> None:
    m = model()
    assert m.roots == ("core",)
    assert m.leaves == ("leaf1", "leaf2", "leaf3")
    assert m.leaf_of("n4") == "leaf2"
    assert m.children("core") == ("spine1", "spine2")
    assert m.leaves_under("spine1") == ("leaf1", "leaf2")
    assert m.nodes_under("core") == ("n1", "n2", "n3", "n4", "n5", "n6")
    assert m.ancestors("leaf3") == ["leaf3", "spine2", "core"]


def test_common_switch_and_hops() -> None:
    m = model()
    assert m.lowest_common_switch(["leaf1"]) == "leaf1"
    assert m.lowest_common_switch(["leaf1", "leaf2"]) == "spine1"
    assert m.lowest_common_switch(["leaf1", "leaf3"]) == "core"
    assert m.spine_levels(["leaf1"]) == 0
    assert m.spine_levels(["leaf1", "leaf2"]) == 1
    assert m.spine_levels(["leaf2", "leaf3"]) == 2
    assert m.hops("leaf1", "leaf1") == 0
    assert m.hops("leaf1", "leaf2") == 2
    assert m.hops("leaf1", "leaf3") == 4


def test_sums() -> None:
    m = model()
    leaf1 = m.stats("leaf1")
    assert (leaf1.nodes_total, leaf1.nodes_usable, leaf1.nodes_idle) == (2, 2, 1)
    assert (leaf1.gpus_total, leaf1.gpus_free, leaf1.cpus_free) == (8, 7, 14)
    leaf2 = m.stats("leaf2")  # n3 full, n4 down: a down node's GPUs are not free
    assert (leaf2.nodes_usable, leaf2.gpus_free) == (1, 0)
    assert m.stats("leaf3").nodes_usable == 1  # n5 IDLE+DRAIN is not schedulable
    core = m.stats("core")
    assert core == m.stats("spine1") + m.stats("spine2")
    assert core.gpus_total == 24 and core.gpus_free == 11
    assert m.free_nodes("core", gpus_per_node=4) == 2
    assert m.free_nodes("core", gpus_per_node=3) == 3


def test_sums_match_nodes_on_big_tree() -> None:
    switches, nodes = synthetic_cluster(32, 32, 4, seed=3)
    m = TopologyModel.build(switches, nodes)
    core = m.stats("core")
    assert core.nodes_total == 1024
    assert core.gpus_total == sum(n.gpus_total for n in nodes)
    assert core.gpus_free == sum(n.gpus_free for n in nodes if schedulable(n))
    assert core.cpus_free == sum(n.cpus_free for n in nodes if schedulable(n))
    assert sum(m.stats(leaf).nodes_usable for leaf in m.leaves) == core.nodes_usable


def test_no_topology_is_one_implicit_leaf() -> None:
    m = TopologyModel.build([], [node("b"), node("a10"), node("a9")])
    assert m.leaves == (IMPLICIT_LEAF,)
    assert m.leaf_nodes(IMPLICIT_LEAF) == ("a9", "a10", "b")
    assert m.stats(IMPLICIT_LEAF).nodes_total == 3
    assert m.spine_levels([IMPLICIT_LEAF]) == 0


def test_unswitched_nodes_are_a_separate_fabric() -> None:
    m = TopologyModel.build([SlurmSwitch("leaf1", 0, nodes=("n1", "ghost"))], [node("n1"), node("n2")])
    assert m.leaf_of("n2") == IMPLICIT_LEAF
    assert m.leaf_nodes("leaf1") == ("n1",)  # "ghost" has no state: left out
    assert m.lowest_common_switch(["leaf1", IMPLICIT_LEAF]) is None
    assert set(m.roots) == {"leaf1", IMPLICIT_LEAF}


def test_with_allocation_round_trip() -> None:
    m = model()
    busy = m.with_allocation(["n1", "n6"], gpus_per_node=4, cpus_per_node=8)
    assert busy.node("n1").state is NodeState.ALLOCATED
    assert busy.stats("core").gpus_free == m.stats("core").gpus_free - 8
    back = busy.with_allocation(["n1", "n6"], gpus_per_node=4, cpus_per_node=8, release=True)
    assert back.node("n1") == m.node("n1")
    assert back.stats("core") == m.stats("core")
    assert m.node("n1").state is NodeState.IDLE  # the original is untouched


def test_upper_switch_listing_all_nodes_is_not_a_leaf() -> None:
    """``scontrol show topology`` on 22.05 prints ``SwitchName=spine Nodes=node[1-6] Switches=leaf[1-2]``."""
    switches = parse_topology(
        "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-3]\n"
        "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[4-6]\n"
        "SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[1-6] Switches=leaf[1-2]\n"
    )
    nodes = [SlurmNode(f"node{i}", NodeState.IDLE, cpus_total=4, gpus_total=4) for i in range(1, 7)]
    model = TopologyModel.build(switches, nodes)
    assert model.leaves == ("leaf1", "leaf2")
    assert model.stats("spine").gpus_total == 24 and model.stats("spine").nodes_total == 6
