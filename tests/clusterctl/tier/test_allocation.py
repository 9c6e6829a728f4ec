"""The tiers of an allocation: node order across leaf switches, each tier's peers, a rank's own tier."""

from __future__ import annotations

from clusterctl.tier.allocation import interleave, parse_topology, peers_of, port_of
from clusterctl.tier.process import endpoints_from_env

TOPOLOGY = """SwitchName=s1 Level=0 LinkSpeed=1 Nodes=node[1-3]
SwitchName=s2 Level=0 LinkSpeed=1 Nodes=node[4-6]
SwitchName=top Level=1 LinkSpeed=1 Nodes=node[1-6] Switches=s[1-2]
"""
HOSTNAMES = {"node[1-3]": ["node1", "node2", "node3"], "node[4-6]": ["node4", "node5", "node6"]}


def test_replicas_go_to_another_leaf_switch_when_the_allocation_spans_two() -> None:
    switch_of = parse_topology(TOPOLOGY, {**HOSTNAMES, "node[1-6]": [f"node{i}" for i in range(1, 7)]})
    assert switch_of == {
        **dict.fromkeys(["node1", "node2", "node3"], "s1"),
        **dict.fromkeys(["node4", "node5", "node6"], "s2"),
    }
    order = interleave(["node1", "node2", "node4", "node5"], switch_of)
    assert order == ["node1", "node4", "node2", "node5"]
    for node in order:  # each tier's first peer (its replica) is on the other switch
        assert switch_of[peers_of(order, node)[0]] != switch_of[node]
    assert interleave(["b", "a"], {}) == ["b", "a"]  # no topology: the allocation's order


def test_every_node_derives_the_same_port_from_the_job_id() -> None:
    assert port_of("123") == port_of("123") != port_of("124")
    assert all(20000 <= port_of(j) < 40000 for j in ("0", "19999", "20000", "99999999", "x"))


def test_a_rank_finds_its_own_nodes_tier_in_the_peer_list() -> None:
    env = {
        "CLUSTERCTL_TIER_PEERS": "node1:20007,node2:20007",
        "CLUSTERCTL_TIER_JOB": "record-7",
        "CLUSTERCTL_TIER_SECRET": "ab" * 32,
        "SLURMD_NODENAME": "node2",
    }
    found = endpoints_from_env(env)
    assert found is not None and found.address == "node2:20007" and found.peers == ("node1:20007",)
    assert endpoints_from_env({**env, "SLURMD_NODENAME": "elsewhere"}) is None  # not in the job: no tier
