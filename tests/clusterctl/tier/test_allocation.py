"""The tiers of an allocation: node order across leaf switches, ports from the secret, each tier's
peers, a rank's own tier."""

from __future__ import annotations

import secrets
import socket

import pytest

from clusterctl.checkpoint import layout
from clusterctl.tier import TierClient, TierError, TierServer, TierSettings
from clusterctl.tier.allocation import (
    CANDIDATES,
    candidate_ports,
    connect_tiers,
    find_tier,
    interleave,
    parse_topology,
    peers_of,
)
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


def test_the_candidate_ports_come_from_the_secret_not_the_job_id() -> None:
    ports = candidate_ports(b"k" * 32)
    assert ports == candidate_ports(b"k" * 32) != candidate_ports(b"l" * 32)  # every node derives the same
    assert len(set(ports)) == len(ports) == CANDIDATES and all(20000 <= p < 40000 for p in ports)


KEY = layout.commit_key(1)


def test_wait_finds_each_tier_past_a_squatter_on_a_candidate_port_and_gives_it_its_peers() -> None:
    secret = secrets.token_bytes(32)
    first, second = candidate_ports(secret)[:2]
    squatter = socket.create_server(("127.0.0.1", first))  # another user's process took the first candidate
    settings = TierSettings(job="record-3", secret=secret, replicas=0, upload=False)
    tiers = [
        TierServer(settings, host=host, port=port).start()
        for host, port in (("127.0.0.1", second), ("127.0.0.2", first))
    ]
    try:
        found = connect_tiers(["127.0.0.1", "127.0.0.2"], secret, "record-3", timeout=5)
        assert found == [f"127.0.0.1:{second}", f"127.0.0.2:{first}"]
        client = TierClient(found[0], secret=secret, job="record-3")
        assert client.put("ns", KEY, b"shard") == 2  # replicated to the peer wait named
        client.close()
        assert tiers[1].store.get("ns", KEY) is not None
        assert find_tier("127.0.0.1", secrets.token_bytes(32), "record-3", timeout=2) is None  # another job's
        with pytest.raises(TierError, match=r"127\.0\.0\.3 did not start"):
            connect_tiers(["127.0.0.3"], secret, "record-3", timeout=0.3)
    finally:
        for tier in tiers:
            tier.close()
        squatter.close()


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
