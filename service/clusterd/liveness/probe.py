"""Is a node alive? Evidence that no tenant controls: how its slurmd's port and its host answer.

A probe is the second opinion that keeps detection from being trigger-happy, and it must not be one
a job can fake. A tenant with a job on the node can fill slurmd's listen queue (connects then time
out) but cannot make the kernel refuse a connection while slurmd listens, nor stop the host from
answering ICMP echo. So:

- slurmd's port refuses (RST): slurmd is gone, the node cannot run work -> ``Reach.REFUSED``
  (at the kernel's default ``net.ipv4.tcp_abort_on_overflow=0``: with 1, a full listen queue
  answers with a reset too, and a tenant could make the port refuse; leave it at 0);
- the connect times out and the host does not answer ping either: powered off, link down ->
  ``Reach.GONE``;
- the connect times out but the host answers ping: slurmd is busy or its queue is full; the node is
  up, nothing is concluded about it -> ``Reach.BUSY``;
- the connect succeeds -> ``Reach.ANSWERS``.

Both checks run off clusterd's event loop (the connect in a worker thread, ping as a child process),
so a stalled loop cannot turn a live node into a silent one: their timeouts are measured by the
kernel and by ping, not by the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import errno
import logging
import shutil
import socket
from typing import Protocol

log = logging.getLogger(__name__)

_PROBE_THREADS = 8  # connects in flight at once (one per suspect node; more wait their turn)


class Reach(enum.Enum):
    ANSWERS = "answers"
    BUSY = "busy"  # slurmd's port silent, the host answers: up
    REFUSED = "refused"  # the host answers that nothing listens on slurmd's port
    GONE = "gone"  # neither slurmd's port nor the host answers

    @property
    def dead(self) -> bool:
        return self in (Reach.REFUSED, Reach.GONE)


class NodeProber(Protocol):
    async def probe(self, address: str, port: int) -> Reach: ...


class SlurmdProber:
    """A TCP connect to slurmd's port (in a worker thread), then ICMP echo when the connect times out."""

    def __init__(self, timeout: float, *, ping: str | None = None) -> None:
        self._timeout = timeout
        self._ping = ping if ping is not None else (shutil.which("ping") or "")
        self._pool = concurrent.futures.ThreadPoolExecutor(_PROBE_THREADS, thread_name_prefix="clusterd-probe")
        self._warned = False
        if not self._ping:
            log.warning("no ping command: a node whose slurmd does not answer is never taken for powered off")

    async def probe(self, address: str, port: int) -> Reach:
        """The ping starts with the connect, so a silent port costs one timeout, not two."""
        loop = asyncio.get_running_loop()
        ping = asyncio.ensure_future(self._host_answers(address))
        try:
            connect = await loop.run_in_executor(self._pool, _connect, address, port, self._timeout)
            if connect is not Reach.GONE:
                return connect
            return Reach.BUSY if await ping else Reach.GONE
        finally:
            ping.cancel()

    async def _host_answers(self, address: str) -> bool:
        """One ICMP echo by the system's ping. Only ping's "no reply" (exit 1) counts as a silent
        host: without ping, or when it cannot run (exit 2: no CAP_NET_RAW, an unknown name), the
        host counts as up, and a silent port concludes nothing."""
        if not self._ping:
            return True
        wait = str(max(1, round(self._timeout)))
        try:
            proc = await asyncio.create_subprocess_exec(
                self._ping,
                "-n",
                "-q",
                "-c",
                "1",
                "-W",
                wait,
                "--",
                address,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            log.warning("cannot run %s: %s; the host counts as up", self._ping, exc)
            return True
        try:
            status = await proc.wait()
            if status not in (0, 1) and not self._warned:
                self._warned = True
                log.warning(
                    "%s %s exited %d (not a reply or its absence): clusterd needs CAP_NET_RAW for "
                    "ping; until then a silent slurmd port never makes a node dead",
                    self._ping,
                    address,
                    status,
                )
            return status != 1
        finally:
            if proc.returncode is None:  # cancelled: the connect already decided (the watcher reaps it)
                proc.kill()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _connect(address: str, port: int, timeout: float) -> Reach:
    """ANSWERS, REFUSED, or GONE for a connect that timed out or found no route (ping decides)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return Reach.ANSWERS
    except ConnectionRefusedError:
        return Reach.REFUSED
    except socket.gaierror:
        return Reach.BUSY  # a name that does not resolve says nothing about the node
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED:
            return Reach.REFUSED
        return Reach.GONE
