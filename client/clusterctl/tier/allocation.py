"""The tiers of a Slurm allocation: one per node, started by the batch script of a job submitted
with ``--checkpoint-tier memory`` (``python -m clusterctl.tier.allocation serve|peers|wait``).

Every node's tier listens on the node's name at a port derived from the job id, so every rank
and every tier computes the same peer list without talking to the others. The nodes are ordered
leaf switch by leaf switch in turn (from ``scontrol show topology`` when Slurm has one), and each
tier's peers start at the node after it: a shard's replica lands on another switch when there is one.
The secret stays in ``CLUSTERCTL_TIER_SECRET``, never in argv.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from .errors import TierError

PORT_BASE = 20000
PORT_SPAN = 20000


def port_of(job: str) -> int:
    """The allocation's tier port: one per job id, in [PORT_BASE, PORT_BASE + PORT_SPAN)."""
    digits = re.sub(r"\D", "", job) or "0"
    return PORT_BASE + int(digits) % PORT_SPAN


def interleave(nodes: Sequence[str], switch_of: Mapping[str, str]) -> list[str]:
    """``nodes`` taken one leaf switch at a time in turn (nodes without a switch form one group)."""
    groups: dict[str, list[str]] = {}
    for n in nodes:
        groups.setdefault(switch_of.get(n, ""), []).append(n)
    out: list[str] = []
    queues = list(groups.values())
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def peers_of(order: Sequence[str], node: str) -> list[str]:
    """The other nodes, starting at the one after ``node``: its replicas go there first."""
    i = list(order).index(node)
    return [*order[i + 1 :], *order[:i]]


def parse_topology(text: str, hostnames: dict[str, list[str]]) -> dict[str, str]:
    """node -> leaf switch from ``scontrol show topology`` (``hostnames`` expands a Nodes= list)."""
    switch_of: dict[str, str] = {}
    for line in text.splitlines():
        m = re.search(r"SwitchName=(\S+).*\bNodes=(\S+)", line)
        if m and re.search(r"\bLevel=0\b", line):
            for n in hostnames.get(m.group(2), []):
                switch_of[n] = m.group(1)
    return switch_of


def _scontrol(*args: str) -> str:
    done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30)
    return done.stdout if done.returncode == 0 else ""


def allocation_order(env: Mapping[str, str] = os.environ) -> list[str]:
    nodes = _scontrol("show", "hostnames", env.get("SLURM_JOB_NODELIST", "")).split()
    if not nodes:
        raise TierError("no nodes: SLURM_JOB_NODELIST is not set or scontrol could not expand it")
    topo = _scontrol("show", "topology")
    lists = set(re.findall(r"\bNodes=(\S+)", topo))
    switch_of = parse_topology(topo, {s: _scontrol("show", "hostnames", s).split() for s in lists})
    return interleave(nodes, switch_of)


def _own_node(env: Mapping[str, str]) -> str:
    return env.get("SLURMD_NODENAME") or socket.gethostname()


def _wait(addresses: Sequence[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for addr in addresses:
        host, port = addr.rsplit(":", 1)
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TierError(f"the memory tier at {addr} did not start in {timeout:g} s") from None
                time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ
    job = env.get("CLUSTERCTL_TIER_JOB", "")
    if len(argv) != 1 or argv[0] not in ("serve", "peers", "wait") or not job:
        print("usage: python -m clusterctl.tier.allocation serve|peers|wait (CLUSTERCTL_TIER_JOB set)", file=sys.stderr)
        return 2
    port = port_of(env.get("SLURM_JOB_ID", job))
    try:
        order = allocation_order(env)
        if argv[0] == "peers":
            print(",".join(f"{n}:{port}" for n in order))
            return 0
        if argv[0] == "wait":
            _wait([f"{n}:{port}" for n in order], timeout=60.0)
            return 0
    except TierError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    from .__main__ import main as serve

    node = _own_node(env)
    peers = peers_of(order, node) if node in order else []
    replicas = "1" if peers else "0"
    return serve(
        [
            "--listen",
            f"{node}:{port}",
            "--job",
            job,
            "--peers",
            ",".join(f"{p}:{port}" for p in peers),
            "--replicas",
            replicas,
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
