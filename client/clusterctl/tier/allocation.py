"""The tiers of a Slurm allocation: one per node, started by the batch script of a job submitted
with ``--checkpoint-tier memory`` (``python -m clusterctl.tier.allocation nodes|serve|wait``).

Every node's tier listens on the node's name at the first free one of a few candidate ports derived
from the job's secret (:func:`candidate_ports`), so two jobs' tiers on a node do not clash. The ports
are not secret once a tier listens (every user sees them in ``/proc/net/tcp``), and another user may
take a candidate first; what holds is the login: ``wait`` finds each node's tier by trying the
candidates in order, each login proving the secret both ways for the node and port dialled (a
process squatting a candidate, or relaying it to the job's tier at another port or node, fails that
and is passed over), tells each tier its peers, and prints the
job's tiers for its ranks (``CLUSTERCTL_TIER_PEERS``); a node whose tier it did not find is named,
with the cause, on the job's stderr, and the job runs on with the others. The nodes are ordered leaf switch by leaf
switch in turn (from ``scontrol show topology`` when Slurm has one), and each tier's peers start at
the node after it: a shard's replica lands on another switch when there is one. The secret stays
in ``CLUSTERCTL_TIER_SECRET``, never in argv.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from .client import TierClient
from .errors import TierBusyError, TierError
from .server import TierSettings

PORT_BASE = 20000
PORT_SPAN = 20000
CANDIDATES = 8


def candidate_ports(secret: bytes, count: int = CANDIDATES) -> list[int]:
    """The ports a job's tier may listen on, in the order tried: HMAC(secret, i) into
    [PORT_BASE, PORT_BASE + PORT_SPAN), distinct."""
    ports: list[int] = []
    i = 0
    while len(ports) < count:
        mac = hmac.new(secret, f"clusterctl-tier-port-{i}".encode(), hashlib.sha256).digest()
        port = PORT_BASE + int.from_bytes(mac[:8], "big") % PORT_SPAN
        if port not in ports:
            ports.append(port)
        i += 1
    return ports


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


LOGIN_TIMEOUT = 2.0  # one candidate's login: a tier answers in milliseconds


def find_tier(node: str, secret: bytes, job: str, *, deadline: float | None = None) -> str | None:
    """``node:port`` of the job's tier on ``node``: the first candidate port that proves the secret
    for that node and port, or None when none does by ``deadline`` (monotonic; default: one pass).

    A silent squatter costs a login's timeout at most, never past the deadline; a tier busy with
    other logins is tried again until the deadline, and TierBusyError says it stayed busy."""
    deadline = time.monotonic() + CANDIDATES * LOGIN_TIMEOUT if deadline is None else deadline
    for port in candidate_ports(secret):
        while (left := deadline - time.monotonic()) > 0:
            client = TierClient(f"{node}:{port}", secret=secret, job=job, timeout=min(LOGIN_TIMEOUT, left))
            try:
                client.status("")
                return client.address
            except TierBusyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)  # the job's tier, or a process that closes every connection: ask again
            except TierError:
                break  # nothing there (yet), or another process: not the job's tier
            finally:
                client.close()
    return None


def connect_tiers(order: Sequence[str], secret: bytes, job: str, timeout: float) -> tuple[list[str], dict[str, str]]:
    """Find each node's tier (waiting ``timeout`` for them to start) and tell each its peers.

    Returns the tiers found (in ``order``) and, for each node whose tier was not, why: the job runs
    on with the tiers it has (a rank on a node without one saves through a peer's)."""
    deadline = time.monotonic() + timeout
    addresses: dict[str, str] = {}
    missing: dict[str, str] = {}
    pending = list(order)
    while pending:
        for node in list(pending):
            try:
                one_pass = time.monotonic() + CANDIDATES * LOGIN_TIMEOUT
                address = find_tier(node, secret, job, deadline=min(deadline, one_pass))
            except TierBusyError:
                missing[node] = "its tier stayed busy with other logins"
                address = None
            if address is not None:
                addresses[node] = address
                missing.pop(node, None)
                pending.remove(node)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    for node in pending:
        missing.setdefault(
            node, f"no process proved the job's secret on any of its {CANDIDATES} ports within {timeout:g} s"
        )
    found = [addresses[n] for n in order if n in addresses]
    while True:  # a tier that does not take its peers is left out, and the others are told again
        for address in found:
            peers = peers_of(found, address)
            client = TierClient(address, secret=secret, job=job)
            try:
                client.configure(peers, 1 if peers else 0)
            except TierError as exc:
                missing[address.rpartition(":")[0]] = f"its tier did not take its peers: {exc}"
                found.remove(address)
                break
            finally:
                client.close()
        else:
            return found, missing


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ
    job = env.get("CLUSTERCTL_TIER_JOB", "")
    if len(argv) != 1 or argv[0] not in ("nodes", "serve", "wait") or not job:
        print("usage: python -m clusterctl.tier.allocation nodes|serve|wait (CLUSTERCTL_TIER_JOB set)", file=sys.stderr)
        return 2
    from .__main__ import serve, take_secret

    secret = take_secret()
    if secret is None:
        return 2
    if argv[0] == "serve":  # its peers come from ``wait``
        return serve(TierSettings(job=job, secret=secret, replicas=0), _own_node(env), candidate_ports(secret))
    try:
        order = allocation_order(env)
        if argv[0] == "nodes":
            print(" ".join(order))
            return 0
        found, missing = connect_tiers(order, secret, job, timeout=60.0)
        print(",".join(found))
        for node, why in missing.items():
            print(f"clusterctl: no memory tier on {node}: {why}", file=sys.stderr)
        if missing:
            print(
                "clusterctl: ranks on "
                + ", ".join(missing)
                + (" save through the other nodes' tiers" if found else ": no tier at all; ranks save to the URI"),
                file=sys.stderr,
            )
        return 0 if found else 1
    except TierError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
