"""The bounded HTTP listener on its own: sizes, deadlines, the overall and per-client bounds, TLS."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clusterd.config import Config, TLSConfig, WebConfig
from clusterd.web.listener import HttpListener
from clusterd.web.server import serve


def _hello(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}?{environ['QUERY_STRING']}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


@contextmanager
def listening(config: Config | None = None, **web: Any) -> Iterator[HttpListener]:
    cfg = config or Config()
    server = serve("127.0.0.1:0", _hello, config=replace(cfg, web=replace(cfg.web, **web)))
    try:
        yield server
    finally:
        server.stop()


def _get(port: int, path: str = "/x?a=1") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def _raw(port: int, data: bytes, *, wait: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_requests_keep_alive_and_reach_the_app() -> None:
    with listening() as server:
        assert _get(server.port) == (200, b"GET /x?a=1")
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        for path in ("/a%20b", "/c"):  # one connection, two requests
            conn.request("GET", path)
            reply = conn.getresponse()
            assert reply.status == 200 and reply.read() == f"GET {path.replace('%20', ' ')}?".encode()
        conn.close()


def test_oversized_head_and_body_are_refused() -> None:
    with listening() as server:
        assert _raw(server.port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n").startswith(
            b"HTTP/1.1 431 "
        )
        body = b"b" * 70_000
        head = f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        assert _raw(server.port, head + body).startswith(b"HTTP/1.1 413 ")


def test_a_slow_head_is_cut_at_the_deadline_and_others_are_served_meanwhile() -> None:
    with listening(request_timeout_seconds=0.5) as server, socket.create_connection(("127.0.0.1", server.port)) as s:
        started = time.monotonic()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):  # a header line now and then does not extend it
            time.sleep(0.2)
            assert _get(server.port)[0] == 200
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
        s.settimeout(5)
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 408 ") and time.monotonic() - started < 1.5


def test_one_client_cannot_hold_every_connection() -> None:
    with listening(max_connections_per_client=2) as server:
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
        try:
            time.sleep(0.2)
            assert _raw(server.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 503 ")
        finally:
            for s in held:
                s.close()
        time.sleep(0.2)
        assert _get(server.port)[0] == 200  # the places are free again


def test_at_the_overall_cap_clients_wait_in_the_kernel_queue() -> None:
    with listening(max_connections=1, request_timeout_seconds=0.5) as server:
        idle = socket.create_connection(("127.0.0.1", server.port))
        try:
            started = time.monotonic()
            assert _get(server.port)[0] == 200  # accepted once the idle one is cut at the deadline
            assert 0.3 < time.monotonic() - started < 2.0
        finally:
            idle.close()


def test_https_with_the_grpc_certificate_and_an_impostor_is_not_trusted(tmp_path: Path) -> None:
    from tests.security.pki import CA

    ca, impostor = CA(tmp_path), CA(tmp_path, "impostor-ca")
    pair = ca.issue("localhost", server=True)
    cfg = Config(tls=TLSConfig(cert_file=str(pair.cert), key_file=str(pair.key)), web=WebConfig(enabled=True))
    with listening(cfg, request_timeout_seconds=1.0) as server:
        silent = socket.create_connection(("127.0.0.1", server.port))  # no handshake: cut, blocks no one
        conn = http.client.HTTPSConnection(
            "localhost", server.port, timeout=5, context=ssl.create_default_context(cafile=str(ca.pem))
        )
        conn.request("GET", "/y")
        assert conn.getresponse().read() == b"GET /y?"
        conn.close()
        wrong = http.client.HTTPSConnection(
            "localhost", server.port, timeout=5, context=ssl.create_default_context(cafile=str(impostor.pem))
        )
        with pytest.raises(ssl.SSLCertVerificationError):
            wrong.request("GET", "/y", headers={"Authorization": "Bearer never-sent"})
        silent.settimeout(5)
        assert silent.recv(1) == b""
        silent.close()
