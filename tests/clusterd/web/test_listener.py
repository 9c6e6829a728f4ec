"""The bounded HTTP listener on its own: sizes, deadlines, pipelining, the overall and per-client
bounds, TLS. The listener runs in the test's event loop; blocking clients run in threads."""

from __future__ import annotations

import asyncio
import http.client
import select
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from clusterd.config import Config, TLSConfig, WebConfig
from clusterd.web.listener import HttpListener, Limits, application
from clusterd.web.server import serve


async def _hello(request: web.Request) -> web.Response:
    return web.Response(text=f"{request.method} {request.path}?{request.query_string}")


@asynccontextmanager
async def listening(config: Config | None = None, **web_limits: Any) -> AsyncIterator[HttpListener]:
    cfg = config or Config()
    app = application()
    app.router.add_route("*", "/{tail:.*}", _hello)
    server = await serve("127.0.0.1:0", app, config=replace(cfg, web=replace(cfg.web, **web_limits)))
    try:
        yield server
    finally:
        await server.stop()


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


def _two_on_one_connection(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    for path in ("/a%20b", "/c"):
        conn.request("GET", path)
        reply = conn.getresponse()
        assert reply.status == 200 and reply.read() == f"GET {path.replace('%20', ' ')}?".encode()
    conn.close()


async def test_requests_keep_alive_and_reach_the_app() -> None:
    async with listening() as server:
        assert await asyncio.to_thread(_get, server.port) == (200, b"GET /x?a=1")
        await asyncio.to_thread(_two_on_one_connection, server.port)


async def test_oversized_head_and_body_are_refused() -> None:
    async with listening() as server:
        # aiohttp answers a request it could not parse in HTTP/1.0: the status is what counts.
        big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
        assert (await asyncio.to_thread(_raw, server.port, big))[8:13] == b" 431 "
        many = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(40)) + b"\r\n"
        assert (await asyncio.to_thread(_raw, server.port, many))[8:13] == b" 431 "
        body = b"b" * 70_000
        head = f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        assert (await asyncio.to_thread(_raw, server.port, head + body)).startswith(b"HTTP/1.1 413 ")


async def test_a_connection_costs_no_thread() -> None:
    async with listening(max_connections_per_client=64) as server:
        before = threading.active_count()
        conns = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(50)]
        try:
            reader, writer = conns[-1]  # accepted in order: an answer on the last means all are in
            writer.write(b"GET /last HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await reader.readline()).startswith(b"HTTP/1.1 200 ")
            assert threading.active_count() == before
        finally:
            for _, w in conns:
                w.close()


def _slow_head(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        started = time.monotonic()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):  # a header line now and then does not extend it
            time.sleep(0.2)
            assert _get(port)[0] == 200
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
        s.settimeout(5)
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 408 ") and time.monotonic() - started < 1.5


async def test_a_slow_head_is_cut_at_the_deadline_and_others_are_served_meanwhile() -> None:
    async with listening(request_timeout_seconds=0.5) as server:
        await asyncio.to_thread(_slow_head, server.port)


def _not_found_then_slow(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /missing HTTP/1.1\r\nHost: x\r\n\r\n")
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 404 ")
        started = time.monotonic()
        s.sendall(b"GET /known HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 408 ") and time.monotonic() - started < 1.5, reply


async def test_the_deadline_holds_on_a_connection_after_a_route_refused_a_request() -> None:
    app = application()
    app.router.add_get("/known", _hello)
    server = await serve(
        "127.0.0.1:0", app, config=replace(Config(), web=replace(Config().web, request_timeout_seconds=0.5))
    )
    try:
        await asyncio.to_thread(_not_found_then_slow, server.port)
    finally:
        await server.stop()


def _crowd(port: int) -> None:
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    try:
        time.sleep(0.2)
        assert _raw(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 503 ")
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    assert _get(port)[0] == 200  # the places are free again


async def test_one_client_cannot_hold_every_connection() -> None:
    async with listening(max_connections_per_client=2) as server:
        await asyncio.to_thread(_crowd, server.port)


def _wait_behind_an_idle_one(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)):
        started = time.monotonic()
        assert _get(port)[0] == 200  # accepted once the idle one is cut at the deadline
        assert 0.3 < time.monotonic() - started < 2.0


async def test_at_the_overall_cap_clients_wait_in_the_kernel_queue() -> None:
    async with listening(max_connections=1, request_timeout_seconds=0.5) as server:
        await asyncio.to_thread(_wait_behind_an_idle_one, server.port)


def _pipeline(port: int, budget: int) -> int:
    """Bytes of pipelined requests the server let in behind an unanswered one, before it stopped reading."""
    request = b"GET /n HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 4000 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        s.setblocking(False)
        sent = 0
        while sent < budget:
            try:
                sent += s.send(request)
            except BlockingIOError:
                if not select.select([], [s], [], 1.0)[1]:
                    break  # a second without room: the server has stopped reading
        return sent


async def test_what_is_pipelined_behind_an_unanswered_request_is_capped() -> None:
    """32 requests queue behind the one being answered; then the socket is not read until they drain."""
    release = asyncio.Event()
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.path)
        if request.path == "/hold":
            await release.wait()
        return web.Response(text="ok")

    app = application()
    app.router.add_get("/{tail:.*}", handle)
    server = await serve("127.0.0.1:0", app, config=Config())
    try:
        budget = 64 << 20
        sent = await asyncio.to_thread(_pipeline, server.port, budget)
        assert sent < budget // 2, sent  # the kernel's buffers and 32 requests, not all that was sent
        assert seen == ["/hold"]
    finally:
        release.set()
        await server.stop()


def _https(port: int, ca: Path, impostor: Path) -> None:
    silent = socket.create_connection(("127.0.0.1", port))  # no handshake: cut, blocks no one
    conn = http.client.HTTPSConnection("localhost", port, timeout=5, context=ssl.create_default_context(cafile=str(ca)))
    conn.request("GET", "/y")
    assert conn.getresponse().read() == b"GET /y?"
    conn.close()
    wrong = http.client.HTTPSConnection(
        "localhost", port, timeout=5, context=ssl.create_default_context(cafile=str(impostor))
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        wrong.request("GET", "/y", headers={"Authorization": "Bearer never-sent"})
    silent.settimeout(5)
    assert silent.recv(1) == b""
    silent.close()


async def test_https_with_the_grpc_certificate_and_an_impostor_is_not_trusted(tmp_path: Path) -> None:
    from tests.security.pki import CA

    ca, impostor = CA(tmp_path), CA(tmp_path, "impostor-ca")
    pair = ca.issue("localhost", server=True)
    cfg = Config(tls=TLSConfig(cert_file=str(pair.cert), key_file=str(pair.key)), web=WebConfig(enabled=True))
    async with listening(cfg, request_timeout_seconds=1.0) as server:
        await asyncio.to_thread(_https, server.port, ca.pem, impostor.pem)


async def test_an_application_without_the_bounds_is_refused() -> None:
    with socket.socket() as sock, pytest.raises(ValueError, match="application"):
        HttpListener(sock, web.Application(), limits=Limits())
