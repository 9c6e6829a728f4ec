"""The dashboard/metrics listener attacked by an unprivileged local user, against a real clusterd.

* Flood and slow-loris: uid nobody opens 1,000 connections and trickles header bytes into them.
  clusterd's threads and descriptors stay bounded (a connection costs no thread), nobody's surplus
  is refused at once, the trickled requests are cut at the deadline, and another client is
  answered promptly throughout, over HTTP and over gRPC (the same event loop serves both).
* Port squat: while clusterd is down, any user may bind a free unprivileged port and collect the
  bearer tokens sent to it. A config that puts the dashboard there is refused by ``clusterd
  check`` and ``clusterd serve``; the port the daemon does use (below 1024) nobody can take.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon
from tests.support.ports import free_port
from tests.support.stack import Stack

pytestmark = pytest.mark.slurm

_AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c"]
# Run as nobody: open N connections, send part of a request head on each, trickle one header
# line every 0.3 s; print when each was closed by the server (seconds), or null if never.
_LORIS = """
import json, resource, socket, sys, time
port, count, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a socket each
conns, closed, start = [], {}, time.monotonic()
for i in range(count):
    s = socket.socket()
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    try:
        s.send(b"GET /api/jobs HTTP/1.1\\r\\nHost: x\\r\\n")
    except OSError:
        pass
    conns.append(s)
print("open", flush=True)
while time.monotonic() - start < hold:
    for i, s in enumerate(conns):
        if i in closed:
            continue
        try:
            if s.recv(4096) == b"":
                closed[i] = time.monotonic() - start
                continue
        except BlockingIOError:
            pass
        except OSError:
            closed[i] = time.monotonic() - start
            continue
        try:
            s.send(b"X-Slow: 1\\r\\n")
        except BlockingIOError:
            pass
        except OSError:
            closed[i] = time.monotonic() - start
    time.sleep(0.3)
print(json.dumps([closed.get(i) for i in range(count)]))
"""


@pytest.fixture(scope="module")
def web_daemon(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(
        stack,
        tmp_path_factory.mktemp("clusterd-webflood"),
        extra_env={
            "CLUSTERD_WEB__ENABLED": "true",
            "CLUSTERD_WEB__REQUEST_TIMEOUT_SECONDS": "2",
            "CLUSTERD_WEB__MAX_CONNECTIONS_PER_CLIENT": "8",
        },
    )
    d.start()
    yield d
    d.stop()


def _threads_and_fds(pid: int) -> tuple[int, int]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    return int(status["Threads"]), len(os.listdir(f"/proc/{pid}/fd"))


def _whoami(port: int, token: str) -> float:
    """Seconds for another user's dashboard call; AssertionError unless it answered 200."""
    started = time.monotonic()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/whoami", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 200 and json.loads(reply.read())["user"] == "alice"
    return time.monotonic() - started


def _list_jobs(daemon: Daemon) -> float:
    with daemon.client("alice") as client:
        started = time.monotonic()
        client.list_jobs(limit=1)
        return time.monotonic() - started


def test_flood_and_slow_loris_stay_bounded_and_others_are_served(web_daemon: Daemon) -> None:
    assert web_daemon.proc is not None and web_daemon.metrics_port is not None
    pid, port, token = web_daemon.proc.pid, web_daemon.metrics_port, web_daemon.stack.tokens["alice"]
    _whoami(port, token)
    _list_jobs(web_daemon)  # whatever threads the calls themselves use exist before the baseline
    threads0, fds0 = _threads_and_fds(pid)
    attack = subprocess.Popen([*_AS_NOBODY, _LORIS, str(port), "1000", "5"], stdout=subprocess.PIPE, text=True)
    try:
        assert attack.stdout is not None and attack.stdout.readline().strip() == "open"
        worst = max(_whoami(port, token) for _ in range(5))
        grpc_worst = max(_list_jobs(web_daemon) for _ in range(5))  # the service's own loop is not held up
        threads, fds = _threads_and_fds(pid)
        out, _ = attack.communicate(timeout=30)
    finally:
        attack.kill()
    closed = json.loads(out)
    # No thread per connection, and nobody holds 8 connections (fds) at most.
    assert threads <= threads0 + 2 and fds <= fds0 + 8 + 4, (threads0, threads, fds0, fds)
    assert worst < 1.0, f"another client waited {worst:.2f} s during the flood"
    assert grpc_worst < 1.0, f"a gRPC call waited {grpc_worst:.2f} s during the flood"
    assert None not in closed, closed  # the server closed every one of them
    kept = [t for t in closed if t >= 1.5]  # the rest (beyond the per-client bound) were refused at once
    assert len(kept) == 8 and max(kept) < 5, closed  # cut at the 2 s deadline, trickle or not
    assert _threads_and_fds(pid)[0] <= threads0 + 2
    _whoami(port, token)


def test_a_squattable_dashboard_port_is_refused_and_the_used_one_cannot_be_squatted(
    web_daemon: Daemon, stack: Stack
) -> None:
    port = free_port()
    squat = subprocess.Popen(
        [
            *_AS_NOBODY,
            f"""
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", {port})); s.listen(); print("bound", flush=True); time.sleep(30)
""",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert squat.stdout is not None and squat.stdout.readline().strip() == "bound"  # any user may do this
        env = {**stack.slurm_env(), "CLUSTERD_WEB__ENABLED": "true", "CLUSTERD_WEB__LISTEN": f"127.0.0.1:{port}"}
        config = str(stack.dir / "clusterd.toml")
        check = subprocess.run(
            [sys.executable, "-m", "clusterd.main", "check", "--config", config],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert check.returncode == 1
        assert f"the dashboard on 127.0.0.1:{port}: any local user may bind port {port}" in check.stdout, check.stdout
        serve = subprocess.run(
            [sys.executable, "-m", "clusterd.main", "serve", "--config", config],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert serve.returncode != 0 and "below 1024" in serve.stdout + serve.stderr, serve.stdout + serve.stderr
    finally:
        squat.kill()
    # The daemon's own dashboard port is below 1024: stopped, nobody still cannot bind it.
    web_daemon.stop()
    try:
        bind = f"import socket; socket.socket().bind(('127.0.0.1', {web_daemon.metrics_port}))"
        taken = subprocess.run([*_AS_NOBODY, bind], capture_output=True, text=True, timeout=30)
        assert taken.returncode != 0 and "PermissionError" in taken.stderr, taken.stderr
    finally:
        web_daemon.start()
