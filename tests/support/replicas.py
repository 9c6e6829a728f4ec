"""Several clusterd replicas on one PostgreSQL store, in front of the stack's Slurm (HA tests, benches).

Each replica is a :class:`Daemon` of its own (own socket, state dir, metrics port); they share the
store URL and list each other as the jobs' heartbeat addresses. A test kills, freezes and restarts
them as a supervisor (systemd, the stack's loop) would.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from clusterctl.client import ClusterClient

from .daemon import Daemon
from .stack import Stack
from .wait import wait_for

LEASE_SECONDS = 3.0


def healthz(url: str) -> dict[str, object]:
    """A replica's /healthz ({"role": "leader"|"follower"|"not ready", ...}); {} when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:  # 503 (not ready) carries the JSON too
        body = exc.read()
    except OSError:
        return {}
    try:
        data: dict[str, object] = json.loads(body)
    except ValueError:
        return {}
    return data


def health(daemon: Daemon) -> dict[str, object]:
    """``daemon``'s /healthz; {} when it is not running or does not answer."""
    if daemon.proc is None or daemon.proc.poll() is not None:
        return {}
    return healthz(f"http://127.0.0.1:{daemon.metrics_port}/healthz")


@dataclass
class Replicas:
    """N clusterd replicas sharing ``store_url``."""

    stack: Stack
    base: Path
    store_url: str
    count: int = 2
    poll_interval: float = 1.0
    lease_seconds: float = LEASE_SECONDS
    daemons: list[Daemon] = field(default_factory=list)

    def __post_init__(self) -> None:
        for i in range(self.count):
            name = f"replica-{chr(ord('a') + i)}"
            daemon = Daemon.reachable_by_jobs(self.stack, self.base / name, poll_interval=self.poll_interval)
            self.daemons.append(daemon)
        beats = ",".join(d.addr for d in self.daemons)
        for i, d in enumerate(self.daemons):
            d.extra_env = {
                "CLUSTERD_STORE__URL": self.store_url,
                "CLUSTERD_HA__REPLICA_NAME": f"replica-{chr(ord('a') + i)}",
                "CLUSTERD_HA__LEASE_SECONDS": str(self.lease_seconds),
                "CLUSTERD_HA__RENEW_SECONDS": str(self.lease_seconds / 3),
                "CLUSTERD_LIVENESS__HEARTBEAT_ADDR": beats,
            }

    @property
    def addr(self) -> str:
        """Every replica's address, comma-separated: what CLUSTERCTL_ADDR holds."""
        return ",".join(d.addr for d in self.daemons)

    def start(self) -> None:
        for d in self.daemons:
            d.start()
        self.leader()

    def stop(self) -> None:
        for d in self.daemons:
            if d.proc is not None:
                os.kill(d.proc.pid, signal.SIGCONT)  # a frozen one must be able to stop
            d.stop()
        for d in self.daemons:
            if d.socket_dir is not None and d.socket_dir.exists():
                for p in d.socket_dir.iterdir():
                    p.unlink()
                d.socket_dir.rmdir()

    def roles(self) -> list[str]:
        return [str(health(d).get("role", "down")) for d in self.daemons]

    def leader(self, timeout: float = 30.0, *, other_than: Daemon | None = None) -> Daemon:
        """The replica that says it leads (waits until exactly one does)."""

        def one() -> Daemon | None:
            leading = [d for d in self.daemons if d is not other_than and health(d).get("role") == "leader"]
            return leading[0] if len(leading) == 1 else None

        return wait_for(one, timeout=timeout, interval=0.1, what="one leader")

    def kill(self, daemon: Daemon, sig: int = signal.SIGKILL) -> float:
        """Signal one replica; returns the wall time of the kill."""
        assert daemon.proc is not None
        at = time.time()
        daemon.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            daemon.proc.wait()
            daemon.proc = None
        return at

    def client(self, user: str = "alice") -> ClusterClient:
        # A short per-attempt deadline: a call stuck on a frozen (SIGSTOPped) replica fails over soon.
        return ClusterClient(self.addr, self.stack.tokens[user], timeout=5.0)
