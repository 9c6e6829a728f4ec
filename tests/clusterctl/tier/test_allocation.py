"""The tiers of an allocation: node order across leaf switches, ports from the secret, each tier's
peers, a rank's own tier."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from clusterctl.checkpoint import layout
from clusterctl.tier import TierClient, TierServer, TierSettings, allocation
from clusterctl.tier.__main__ import serve
from clusterctl.tier.allocation import (
    CANDIDATES,
    candidate_ports,
    connect_tiers,
    find_tier,
    interleave,
    parse_topology,
    peers_of,
)
from clusterctl.tier.process import endpoints_from_env, tiers_did_not_start
from tests.support.ports import port_is_free

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
        found, missing = connect_tiers(["127.0.0.1", "127.0.0.2"], secret, "record-3", timeout=5)
        assert found == [f"127.0.0.1:{second}", f"127.0.0.2:{first}"] and missing == {}
        client = TierClient(found[0], secret=secret, job="record-3")
        assert client.put("ns", KEY, b"shard") == 2  # replicated to the peer wait named
        client.close()
        assert tiers[1].store.get("ns", KEY) is not None
        assert find_tier("127.0.0.1", secrets.token_bytes(32), "record-3") is None  # another job's
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
    elsewhere = endpoints_from_env({**env, "SLURMD_NODENAME": "node3"})  # its tier did not start: a peer's
    assert elsewhere is not None and elsewhere.address in ("node1:20007", "node2:20007")
    assert elsewhere.peers == tuple(p for p in ("node1:20007", "node2:20007") if p != elsewhere.address)
    assert endpoints_from_env({**env, "CLUSTERCTL_TIER_PEERS": ""}) is None
    assert tiers_did_not_start({**env, "CLUSTERCTL_TIER_PEERS": ""}) and not tiers_did_not_start(env)


def test_wait_keeps_the_tiers_it_found_and_names_the_nodes_without_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = secrets.token_bytes(32)
    tier = TierServer(
        TierSettings(job="record-5", secret=secret, replicas=0, upload=False),
        host="127.0.0.1",
        port=candidate_ports(secret)[0],
    ).start()
    try:
        monkeypatch.setenv("CLUSTERCTL_TIER_JOB", "record-5")
        monkeypatch.setenv("CLUSTERCTL_TIER_SECRET", secret.hex())
        monkeypatch.setattr(allocation, "allocation_order", lambda env: ["127.0.0.1", "127.0.0.3"])
        monkeypatch.setattr(allocation, "connect_tiers", _quick(allocation.connect_tiers))
        assert allocation.main(["wait"]) == 0
        out, err = capsys.readouterr()
        assert out.strip() == tier.address
        assert "no memory tier on 127.0.0.3: no process proved the job's secret" in err
        assert "ranks on 127.0.0.3 save through the other nodes' tiers" in err
    finally:
        tier.close()


def _quick(connect: Any) -> Any:
    return lambda order, secret, job, timeout: connect(order, secret, job, timeout=0.5)


def test_a_busy_tier_is_asked_again_not_passed_over() -> None:
    secret = secrets.token_bytes(32)
    settings = TierSettings(job="record-6", secret=secret, replicas=0, upload=False, max_logins=0)
    tier = TierServer(settings, host="127.0.0.1", port=candidate_ports(secret)[0]).start()
    threading.Timer(4.0, lambda: setattr(tier, "settings", replace(settings, max_logins=32))).start()
    try:  # busy for longer than a client's own retries (about 3 s)
        assert find_tier("127.0.0.1", secret, "record-6", deadline=time.monotonic() + 30) == tier.address
    finally:
        tier.close()


def test_a_busy_tier_past_the_deadline_is_reported_as_busy() -> None:
    secret = secrets.token_bytes(32)
    settings = TierSettings(job="record-6", secret=secret, replicas=0, upload=False, max_logins=0)
    tier = TierServer(settings, host="127.0.0.1", port=candidate_ports(secret)[0]).start()
    try:
        found, missing = connect_tiers(["127.0.0.1"], secret, "record-6", timeout=1)
        assert found == [] and "busy" in missing["127.0.0.1"]
    finally:
        tier.close()


def test_silent_squatters_on_every_candidate_cost_no_more_than_the_deadline() -> None:
    secret = secrets.token_bytes(32)
    squatters = [socket.create_server(("127.0.0.1", port)) for port in candidate_ports(secret)]  # never answer
    try:
        begin = time.monotonic()
        assert find_tier("127.0.0.1", secret, "record-8", deadline=begin + 1) is None
        assert time.monotonic() - begin < 8  # not 8 logins of 2 s each
    finally:
        for s in squatters:
            s.close()


def test_serve_passes_over_a_taken_candidate_and_wait_finds_it_there() -> None:
    # A secret whose first two candidates are free now: other processes on a busy host (outgoing
    # connections' ephemeral ports among them) hold ports of the candidates' range.
    secrets_tried = (secrets.token_bytes(32) for _ in range(100))
    secret = next(s for s in secrets_tried if all(map(port_is_free, candidate_ports(s)[:2])))
    first, second = candidate_ports(secret)[:2]
    env = {
        **os.environ,
        "CLUSTERCTL_TIER_JOB": "record-11",
        "CLUSTERCTL_TIER_SECRET": secret.hex(),
        "SLURMD_NODENAME": "127.0.0.1",
    }
    with socket.create_server(("127.0.0.1", first)):  # another user's process took the first candidate
        proc = subprocess.Popen(
            [sys.executable, "-m", "clusterctl.tier.allocation", "serve"], env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == f"listening 127.0.0.1:{second}"
            found, missing = connect_tiers(["127.0.0.1"], secret, "record-11", timeout=10)
            assert found == [f"127.0.0.1:{second}"] and missing == {}
        finally:
            proc.send_signal(signal.SIGUSR1)
            assert proc.wait(30) == 0
            proc.stdout.close()  # type: ignore[union-attr]


def test_serve_reports_a_failure_to_listen_that_is_not_a_taken_port(capsys: pytest.CaptureFixture[str]) -> None:
    settings = TierSettings(job="record-12", secret=secrets.token_bytes(32), replicas=0, upload=False)
    assert serve(settings, "192.0.2.1", [20001, 20002], nice=0) == 1  # TEST-NET-1: no local address
    err = capsys.readouterr().err
    assert "cannot listen on 192.0.2.1:20001" in err and "no free port" not in err
