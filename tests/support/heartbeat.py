"""A fake clusterd that only answers ``JobService.Heartbeat``: records every beat with its arrival time.

Used by the heartbeat client's tests and by bench/restart.py (the first-step beat is the last
phase of a restart). It listens on a unix socket; ``interval``/``stop``/``stopping``/``stop_step``/
``want_stack``/``checkpoint_interval`` set what each reply says.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc

HeartbeatRequest = jobs_pb2.HeartbeatRequest


class FakeJobService(jobs_pb2_grpc.JobServiceServicer):
    """Heartbeat only (every other JobService method answers UNIMPLEMENTED, as the base class does)."""

    def __init__(
        self, *, interval: float = 0.0, stop: bool = False, stopping: bool = False, stop_step: int | None = None
    ) -> None:
        self.interval = interval
        self.stop = stop
        self.stopping = stopping
        self.stop_step = stop_step
        self.want_stack = False
        self.checkpoint_interval: float | None = None  # the advice each reply carries (None: none)
        self.beats: list[tuple[float, HeartbeatRequest]] = []  # (time.monotonic() on arrival, request)
        self._cond = threading.Condition()

    def Heartbeat(self, request: HeartbeatRequest, context: Any) -> jobs_pb2.HeartbeatResponse:
        with self._cond:
            self.beats.append((time.monotonic(), request))
            self._cond.notify_all()
        reply = jobs_pb2.HeartbeatResponse(
            stop=self.stop, stopping=self.stopping, stop_step=self.stop_step, want_stack=self.want_stack
        )
        if self.interval:
            reply.interval.FromNanoseconds(int(self.interval * 1e9))
        if self.checkpoint_interval is not None:
            reply.checkpoint_interval.FromNanoseconds(int(self.checkpoint_interval * 1e9))
        return reply

    def requests(self) -> list[HeartbeatRequest]:
        with self._cond:
            return [r for _, r in self.beats]

    def wait_for(
        self, predicate: Callable[[HeartbeatRequest], bool], timeout: float = 10.0, what: str = "a heartbeat"
    ) -> tuple[float, HeartbeatRequest]:
        """The first beat (arrival time, request) that satisfies ``predicate``; AssertionError after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for beat in self.beats:
                    if predicate(beat[1]):
                        return beat
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}; got {len(self.beats)} beats")
                self._cond.wait(left)


@contextmanager
def serve(socket_path: Path, servicer: jobs_pb2_grpc.JobServiceServicer | None) -> Iterator[grpc.Server]:
    """A gRPC server on ``unix:socket_path`` with ``servicer`` (None: no service at all, UNIMPLEMENTED)."""
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    if servicer is not None:
        jobs_pb2_grpc.add_JobServiceServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix:{socket_path}")
    server.start()
    try:
        yield server
    finally:
        # stop() only starts the shutdown: its listener unlinks the socket path when it closes, which
        # would remove the socket of a server started next on the same path. Wait until it is done.
        server.stop(0).wait(10)


def heartbeat_env(socket_path: Path, **extra: str) -> dict[str, str]:
    """The variables clusterd puts in a job for its heartbeats (rank 1 of 2 on node7, restart 2)."""
    return {
        "CLUSTERCTL_HEARTBEAT_ADDR": f"unix:{socket_path}",
        "CLUSTERCTL_HEARTBEAT_TOKEN": "hb-token",
        "CLUSTERCTL_RECORD_ID": "42",
        "CLUSTERCTL_HEARTBEAT_INTERVAL": "0.2",
        "SLURM_JOB_ID": "1234",
        "SLURM_RESTART_COUNT": "2",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURMD_NODENAME": "node7",
        **extra,
    }


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """This environment without any heartbeat/Slurm variables, plus ``extra``, importing this checkout's clusterctl."""
    import clusterctl

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLUSTERCTL_", "SLURM_"))}
    paths = [str(Path(clusterctl.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return {**env, **extra}


def run_child(code: str, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) in a child Python with ``env`` on top of :func:`child_env`'s environment."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
