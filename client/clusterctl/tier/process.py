"""Starting a tier process, and finding the job's tiers from the environment.

A rank finds its job's tiers in its environment: the node's tier (``CLUSTERCTL_TIER_ADDR``), the
job's other tiers in placement order (``CLUSTERCTL_TIER_PEERS``), the job id and its secret
(``CLUSTERCTL_TIER_JOB``, ``CLUSTERCTL_TIER_SECRET``, hex), set by whatever started the job's
tiers (``python -m clusterctl.tier`` on each node, e.g. the job's wrapper). A rank on a node of
the allocation whose tier did not start uses another node's. Without them a single-rank checkpoint
manager starts a tier of its own (:func:`spawn_tier`): one copy in memory, no peers.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import TierError

ENV_ADDR = "CLUSTERCTL_TIER_ADDR"
ENV_PEERS = "CLUSTERCTL_TIER_PEERS"
ENV_JOB = "CLUSTERCTL_TIER_JOB"
ENV_SECRET = "CLUSTERCTL_TIER_SECRET"
ENV_REPLICAS = "CLUSTERCTL_TIER_REPLICAS"


@dataclass(frozen=True)
class TierEndpoints:
    """Where a rank finds its job's tiers, and the credentials to use them."""

    address: str
    peers: tuple[str, ...]
    job: str
    secret: bytes


def endpoints_from_env(env: Mapping[str, str] = os.environ) -> TierEndpoints | None:
    """The job's tiers, or None when the environment names none. Raises TierError when half-set."""
    address = env.get(ENV_ADDR, "") or _own_peer(env)
    if not address:
        return None
    try:
        secret = bytes.fromhex(env.get(ENV_SECRET, ""))
    except ValueError:
        raise TierError(f"{ENV_SECRET} is not hex") from None
    job = env.get(ENV_JOB, "")
    if len(secret) < 16 or not job:
        raise TierError(f"{ENV_ADDR} is set but {ENV_SECRET} (>= 16 bytes, hex) or {ENV_JOB} is missing")
    peers = tuple(p for p in env.get(ENV_PEERS, "").split(",") if p and p != address)
    return TierEndpoints(address, peers, job, secret)


def _own_peer(env: Mapping[str, str]) -> str:
    """In an allocation's job (no ``CLUSTERCTL_TIER_ADDR``: one batch environment for every node),
    the entry of ``CLUSTERCTL_TIER_PEERS`` on this rank's node; on a node whose tier did not start,
    another node's (one picked by the node's name, so such nodes' ranks spread over the tiers)."""
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    peers = [p for p in env.get(ENV_PEERS, "").split(",") if p]
    own = next((p for p in peers if p.rpartition(":")[0] == node), "")
    return own or (peers[zlib.crc32(node.encode()) % len(peers)] if peers else "")


def tiers_did_not_start(env: Mapping[str, str] = os.environ) -> bool:
    """An allocation's job whose batch script found no tier at all (it said why on the job's stderr):
    ``CLUSTERCTL_TIER_PEERS`` set, and empty."""
    return ENV_ADDR not in env and ENV_PEERS in env and not env[ENV_PEERS].strip(", ")


class TierProcess:
    """A tier running as a child process (the manager's own, or one of a test's)."""

    def __init__(self, proc: subprocess.Popen[str], endpoints: TierEndpoints) -> None:
        self.proc = proc
        self.endpoints = endpoints

    @property
    def address(self) -> str:
        return self.endpoints.address

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def spawn_tier(
    *,
    job: str = "local",
    secret: bytes | None = None,
    peers: Sequence[str] = (),
    replicas: int = 0,
    cap_bytes: int | None = None,
    host: str = "127.0.0.1",
    handoff_delay: float | None = None,
    extra_env: Mapping[str, str] | None = None,
    start_timeout: float = 30.0,
) -> TierProcess:
    """Start ``python -m clusterctl.tier`` and wait until it listens (its address is on its stdout);
    raises TierError when it exits or stays silent for ``start_timeout`` seconds."""
    secret = secret or secrets.token_bytes(32)
    argv = [sys.executable, "-m", "clusterctl.tier", "--listen", f"{host}:0", "--job", job, "--replicas", str(replicas)]
    argv.append("--exit-with-parent")
    if peers:
        argv += ["--peers", ",".join(peers)]
    if cap_bytes is not None:
        argv += ["--cap-bytes", str(cap_bytes)]
    if handoff_delay is not None:
        argv += ["--handoff-delay", str(handoff_delay)]
    env = {**os.environ, **(extra_env or {}), ENV_SECRET: secret.hex()}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    stdout = proc.stdout
    assert stdout is not None
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(start_timeout)
    line = first[0].strip() if first else f"nothing within {start_timeout:g} s"
    if not line.startswith("listening "):
        proc.kill()
        proc.wait()
        raise TierError(f"the memory tier process did not start (exit {proc.poll()}): {line!r}")
    return TierProcess(proc, TierEndpoints(line.split()[1], tuple(peers), job, secret))
