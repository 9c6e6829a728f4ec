"""The tier's login binds the address the client dialled: a relay to the job's tier elsewhere fails."""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
from collections.abc import Iterator

import pytest

from clusterctl.tier import TierClient, TierError, TierServer, TierSettings
from clusterctl.tier.allocation import candidate_ports, find_tier

JOB = "record-9"
SECRET = secrets.token_bytes(32)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(1 << 16):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def relay(listen: tuple[str, int], target: str) -> Iterator[str]:
    """A process at ``listen`` that forwards every byte to the tier at ``target`` and back."""
    server = socket.create_server(listen)
    host, _, port = target.rpartition(":")

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                upstream = socket.create_connection((host, int(port)))
                for a, b in ((conn, upstream), (upstream, conn)):
                    threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"{listen[0]}:{server.getsockname()[1]}"
    finally:
        server.close()


@pytest.fixture
def tier() -> Iterator[TierServer]:
    server = TierServer(TierSettings(JOB, SECRET, replicas=0, upload=False)).start()
    yield server
    server.close()


def test_a_relay_on_another_port_is_refused_by_both_sides(tier: TierServer) -> None:
    with relay(("127.0.0.1", 0), tier.address) as fake:
        client = TierClient(fake, secret=SECRET, job=JOB, timeout=5)
        with pytest.raises(TierError, match="refused this process"):
            client.status("")
        client.close()
    assert TierClient(tier.address, secret=SECRET, job=JOB, timeout=5).status("")["used"] == 0


def test_a_relay_on_another_node_at_the_same_port_is_refused(tier: TierServer) -> None:
    port = int(tier.address.rpartition(":")[2])
    # the same candidate port on another node, relayed here
    with relay(("127.0.0.2", port), tier.address) as fake, pytest.raises(TierError, match="refused this process"):
        TierClient(fake, secret=SECRET, job=JOB, timeout=5).status("")


def test_find_tier_passes_over_a_relay_on_the_first_candidate() -> None:
    first, second = candidate_ports(SECRET)[:2]
    real = TierServer(TierSettings(JOB, SECRET, replicas=0, upload=False), host="127.0.0.1", port=second).start()
    try:
        with relay(("127.0.0.1", first), real.address):
            assert find_tier("127.0.0.1", SECRET, JOB) == real.address
    finally:
        real.close()
