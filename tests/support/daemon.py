"""clusterd as a separate process in front of the stack's Slurm, for tests that need the real thing.

Each instance has its own unix socket, state dir and metrics port, so a test can kill and restart it
without disturbing the stack's own service.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from clusterctl.client import ClusterClient

from .ports import free_port, free_privileged_port
from .promtext import scrape
from .stack import Stack


@dataclass
class Daemon:
    """One clusterd process in front of ``stack``'s Slurm, with its own state dir.

    Tests listen on a unix socket beside the state dir (the production transport); benches set
    ``tcp`` for a loopback TCP port (``--allow-insecure``), as their figures were measured.
    ``config`` defaults to the stack's clusterd.toml; benches pass their own (own tokens, job root).
    """

    stack: Stack
    state_dir: Path
    poll_interval: float = 1.0
    socket_dir: Path | None = None  # default <state_dir>.sock: beside the 0700 state dir, not inside it
    socket_group: str = ""  # who besides root may connect (CLUSTERD_SOCKET_GROUP); "" = root only
    # /metrics and the dashboard (None: neither): a port below 1024, as a plaintext dashboard needs.
    metrics_port: int | None = field(default_factory=free_privileged_port)
    extra_env: dict[str, str] = field(default_factory=dict)  # CLUSTERD_* settings of this test's service
    config: Path | None = None  # default: the stack's clusterd.toml
    tcp: bool = False  # listen on 127.0.0.1:<free port> instead of the unix socket
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    port: int = field(default_factory=free_port)  # used when tcp

    @property
    def socket_path(self) -> Path:
        return (self.socket_dir or self.state_dir.with_name(self.state_dir.name + ".sock")) / "clusterd.sock"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}" if self.tcp else f"unix:{self.socket_path}"

    def start(self, timeout: float = 60.0) -> None:
        """Start the process and wait until its health check says SERVING (AssertionError, the
        process stopped, if not)."""
        self.log_path = self.state_dir / "clusterd.log"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        aws = {k: v for k, v in self.stack.env.items() if k.startswith("AWS_")}  # progress reads markers
        metrics = f"127.0.0.1:{self.metrics_port}" if self.metrics_port is not None else ""
        env = {
            **self.stack.slurm_env(),
            **aws,
            "CLUSTERD_POLL_INTERVAL_SECONDS": str(self.poll_interval),
            "CLUSTERD_METRICS_LISTEN": metrics,
            "CLUSTERD_LOG_FORMAT": "json",
            "CLUSTERD_SOCKET_GROUP": self.socket_group,
            "CLUSTERD_WEB__LISTEN": "",  # the dashboard: on metrics
            **({"CLUSTERD_WEB__ENABLED": "false"} if self.metrics_port is None else {}),
            # Tests kill nodes with jobs on them: a drained node would stay out of service for every
            # later test (tests of draining set it back to true in extra_env).
            "CLUSTERD_LIVENESS__DRAIN_FAILING_NODES": "false",
            **self.extra_env,
        }
        config = self.config or self.stack.dir / "clusterd.toml"
        argv = [
            sys.executable,
            "-m",
            "clusterd.main",
            "serve",
            "--config",
            str(config),
            "--listen",
            self.addr,
            "--state-dir",
            str(self.state_dir),
            *(["--allow-insecure"] if self.tcp else []),
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
        try:
            self.wait_serving(timeout)
        except BaseException:
            self.stop()  # a fixture whose start failed never reaches its own stop: no daemon left behind
            raise

    def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.addr) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while time.monotonic() < deadline:
                assert self.proc is not None and self.proc.poll() is None, self.tail()
                try:
                    if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.2)
        raise AssertionError(f"clusterd did not become healthy:\n{self.tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self, sig: int = signal.SIGKILL) -> None:
        self.stop(sig)
        self.start()

    def metrics(self) -> dict[str, float]:
        assert self.metrics_port is not None, "this clusterd runs without /metrics"
        return scrape(self.metrics_port)

    def log_records(self) -> list[dict[str, Any]]:
        """clusterd's JSON log lines (other lines, e.g. from grpc's C core, are skipped)."""
        assert self.log_path is not None
        out = []
        for line in self.log_path.read_text().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def tail(self) -> str:
        return self.log_path.read_text()[-3000:] if self.log_path and self.log_path.exists() else ""

    @classmethod
    def reachable_by_jobs(cls, stack: Stack, state_dir: Path, **kwargs: Any) -> Daemon:
        """One whose socket the jobs' ranks can reach (group clusterctl, under the stack's run/):
        their heartbeats are how it detects dead nodes and hung ranks. Remove ``socket_dir`` after."""
        sockets = stack.dir / "run" / f"test-{state_dir.name}-{os.getpid()}"
        return cls(stack, state_dir, socket_dir=sockets, socket_group="clusterctl", **kwargs)

    def client(self, user: str = "alice") -> ClusterClient:
        return ClusterClient(self.addr, self.stack.tokens[user])

    def cli_env(self, user: str = "alice") -> dict[str, str]:
        return {**os.environ, "CLUSTERCTL_ADDR": self.addr, "CLUSTERCTL_TOKEN": self.stack.tokens[user]}
