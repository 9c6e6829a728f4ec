"""Another client's dashboard answer time while one local user floods the listener.

clusterd runs in this process over FakeSlurm with the dashboard on its metrics listener (default
bounds: 128 connections, 16 per client, 10 s deadline). Uid nobody opens 1,000 connections and
holds them, idle (connected, nothing sent) or as a slow-loris (a partial request head, one more
header line every 0.3 s); meanwhile root calls /api/whoami, each call on a new connection, so
its connect waits in the same accept queue as the flood's. The anchor is the same calls with no
flood, in the same run. Needs root (the flood runs as nobody: another uid, as on a shared node).

    python -m bench.web_listener                 # 1,000 connections, 100 calls per phase
    python -m bench.web_listener --connections 300 --calls 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from asyncio.subprocess import PIPE
from pathlib import Path

from clusterd.config import Config, LimitsConfig, SlurmConfig, WebConfig
from clusterd.server import ClusterDaemon
from clusterd.slurm.fake import FakeSlurm

TOKEN = "bench-token-aaaaaaaaaaaa"
# Run as nobody: open N connections (idle, or sending a partial head and trickling header lines),
# print "open" and hold them (noting which the server closed) until killed.
_FLOOD = """
import socket, sys, time
port, count, trickle = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
conns = []
for _ in range(count):
    s = socket.socket()
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    if trickle:
        try:
            s.send(b"GET /api/whoami HTTP/1.1\\r\\nHost: x\\r\\n")
        except OSError:
            pass
    conns.append(s)
print("open", flush=True)
closed = set()
while True:
    for i, s in enumerate(conns):
        if i in closed:
            continue
        try:
            if s.recv(4096) == b"":
                closed.add(i)
                continue
        except BlockingIOError:
            pass
        except OSError:
            closed.add(i)
            continue
        if trickle:
            try:
                s.send(b"X-Slow: 1\\r\\n")
            except OSError:
                pass
    time.sleep(0.3)
"""


def _call(port: int) -> float:
    started = time.perf_counter()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/whoami", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200 and json.loads(reply.read())["user"] == "root"
    return (time.perf_counter() - started) * 1e3


async def _calls(port: int, n: int) -> list[float]:
    return [await asyncio.to_thread(_call, port) for _ in range(n)]


async def _flooded(port: int, connections: int, calls: int, trickle: bool) -> list[float]:
    """Calls from the moment the flood starts until ``calls`` more after all its connections are open."""
    runner = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if os.geteuid() == 0 else []
    flood = await asyncio.create_subprocess_exec(
        *runner, sys.executable, "-c", _FLOOD, str(port), str(connections), "1" if trickle else "0", stdout=PIPE
    )
    assert flood.stdout is not None
    opened = asyncio.create_task(flood.stdout.readline())
    times: list[float] = []
    try:
        while not opened.done():
            times.append(await asyncio.to_thread(_call, port))
        assert opened.result().strip() == b"open"
        times += await _calls(port, calls)
    finally:
        opened.cancel()
        flood.kill()
        await flood.wait()
    return times


def _row(name: str, times: list[float], anchor: list[float]) -> str:
    p50, worst = statistics.median(times), max(times)
    return f"{name:28}{p50:9.2f}{p50 / statistics.median(anchor):8.2f}x{worst:11.2f}{worst / max(anchor):8.2f}x"


async def run(connections: int, calls: int) -> None:
    if os.geteuid() != 0:
        print("not root: the flood runs as this uid, so the measured client shares its per-client bound")
    with tempfile.TemporaryDirectory(prefix="web-bench-") as tmp:
        tokens = Path(tmp) / "tokens.toml"
        tokens.write_text(f'[[token]]\nuser = "root"\ntoken = "{TOKEN}"\nadmin = true\n')
        tokens.chmod(0o600)
        config = Config(
            listen="127.0.0.1:0",
            allow_insecure=True,
            metrics_listen="127.0.0.1:0",
            state_dir=f"{tmp}/state",
            tokens_file=str(tokens),
            poll_interval_seconds=3600.0,
            slurm=SlurmConfig(default_partition="debug", job_root=f"{tmp}/jobs"),
            web=WebConfig(enabled=True),
            limits=LimitsConfig(requests_per_second=0),  # the per-user rate is not what is measured
        )
        daemon = ClusterDaemon(config, backend=FakeSlurm.cluster())
        await daemon.start()
        try:
            port = daemon.web_port
            assert port is not None
            await _calls(port, 5)  # warm
            anchor = await _calls(port, calls)
            idle = await _flooded(port, connections, calls, trickle=False)
            loris = await _flooded(port, connections, calls, trickle=True)
        finally:
            await daemon.stop()
    print(f"web_listener bench: {connections} connections from uid nobody, {calls} /api/whoami calls per phase")
    print(f"{'':28}{'p50 ms':>9}{'ratio':>9}{'worst ms':>11}{'ratio':>9}")
    print(_row("no flood (anchor)", anchor, anchor))
    print(_row(f"{connections} idle connections", idle, anchor))
    print(_row(f"{connections} slow-loris", loris, anchor))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--connections", type=int, default=1000, help="the flood's connections (default 1000)")
    parser.add_argument("--calls", type=int, default=100, help="dashboard calls per phase (default 100)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the daemon's own warnings (plaintext test token) are not the result
    asyncio.run(run(args.connections, args.calls))


if __name__ == "__main__":
    main()
