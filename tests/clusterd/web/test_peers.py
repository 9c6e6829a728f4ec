"""A loopback or unix-socket client is named by its uid, whichever port or family it comes from."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from clusterd.web.peers import GONE, PeerKeys
from tests.support.privileges import needs_root

CONNECTS_AS_NOBODY = needs_root("connects as uid nobody (setpriv)")

_CONNECT = (
    "import socket, time; s = socket.socket({family}); s.connect({address!r}); print('in', flush=True); time.sleep(5)"
)


def _key_of_nobody(server: socket.socket, family: int, address: object) -> str:
    client = subprocess.Popen(
        [
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            sys.executable,
            "-c",
            _CONNECT.format(family=int(family), address=address),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "in"
        conn, _ = server.accept()
        with conn:
            keys = PeerKeys()
            try:
                return keys.key(conn)
            finally:
                keys.close()
    finally:
        client.kill()
        client.wait()


@CONNECTS_AS_NOBODY
@pytest.mark.parametrize(
    ("family", "bind", "host"),
    [
        (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
        (socket.AF_INET6, "::1", "::1"),
        (socket.AF_INET6, "::", "127.0.0.1"),
    ],
)
def test_a_loopback_client_is_its_uid(family: int, bind: str, host: str) -> None:
    with socket.socket(family) as server:
        if bind == "::":
            server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual stack: an IPv4 client
        server.bind((bind, 0))
        server.listen()
        port = server.getsockname()[1]
        client_family = socket.AF_INET if host == "127.0.0.1" else socket.AF_INET6
        assert _key_of_nobody(server, client_family, (host, port)) == f"uid:{65534}"
        with socket.create_connection((host, port)), server.accept()[0] as mine:
            assert PeerKeys().key(mine) == f"uid:{os.geteuid()}"


@CONNECTS_AS_NOBODY
def test_a_unix_socket_client_is_its_uid() -> None:
    directory = Path(tempfile.mkdtemp(prefix="peers-"))  # pytest's own tmp dirs are root-only
    try:
        directory.chmod(0o755)
        path = str(directory / "s.sock")
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(path)
            os.chmod(path, 0o666)
            server.listen()
            assert _key_of_nobody(server, socket.AF_UNIX, path) == "uid:65534"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_a_client_that_closed_before_the_accept_is_nobodys() -> None:
    """The kernel reports uid 0 for such a socket: counted as root's, it would crowd root's share."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        conn, _ = server.accept()
        with conn:
            assert PeerKeys().key(conn) == GONE
