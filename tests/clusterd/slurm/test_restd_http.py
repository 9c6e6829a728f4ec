"""The slurmrestd backend's HTTP client over real sockets (an aiohttp server on loopback and on a
unix socket): what it sends, what it returns, keep-alive, and how a missing answer looks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from clusterd.slurm.restd_http import AiohttpClient, HttpFailure
from tests.support.ports import free_port

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Server:
    """One aiohttp app on 127.0.0.1 and on a unix socket, recording each request's peer."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.peers: list[object] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        return await self.handler(request)


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Callable[[Handler], Awaitable[tuple[str, str, Server]]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> tuple[str, str, Server]:
        server = Server(handler)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", server._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        runners.append(runner)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        sock = tmp_path / f"restd-{len(runners)}.sock"
        await web.UnixSite(runner, str(sock)).start()
        return f"http://127.0.0.1:{port}", f"unix://{sock}", server

    yield start
    for runner in runners:
        await runner.cleanup()


async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path": request.path,
            "user": request.headers.get("X-SLURM-USER-NAME"),
            "type": request.headers.get("Content-Type"),
            "body": json.loads(body) if body else None,
        }
    )


@pytest.mark.parametrize("which", ["tcp", "unix"])
async def test_a_json_request_and_its_answer(serve: Callable[[Handler], Awaitable[tuple[str, str, Server]]],
                                             which: str) -> None:  # fmt: skip
    tcp, unix, _ = await serve(echo)
    client = AiohttpClient(tcp if which == "tcp" else unix, 5)
    try:
        reply = await client.request("POST", "/slurm/v0.0.38/job/submit", headers={"X-SLURM-USER-NAME": "alice"},
                                     body={"job": {"name": "x"}})  # fmt: skip
        assert (reply.status, reply.reason) == (200, "OK")
        assert reply.json() == {"method": "POST", "path": "/slurm/v0.0.38/job/submit", "user": "alice",
                                "type": "application/json", "body": {"job": {"name": "x"}}}  # fmt: skip
        reply = await client.request("GET", "/openapi/v3", headers={})
        assert reply.json()["body"] is None and reply.json()["method"] == "GET"
    finally:
        await client.aclose()


async def test_errors_come_back_as_answers_with_their_body(
    serve: Callable[[Handler], Awaitable[tuple[str, str, Server]]],
) -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=500, reason="Internal Server Error", text="not json")

    tcp, _, _ = await serve(refuse)
    client = AiohttpClient(tcp + "/", 5)  # a trailing slash is not doubled
    try:
        reply = await client.request("GET", "/slurm/v0.0.38/jobs", headers={})
        assert (reply.status, reply.reason, reply.text) == (500, "Internal Server Error", "not json")
        with pytest.raises(ValueError):
            reply.json()
    finally:
        await client.aclose()


async def test_requests_reuse_a_kept_alive_connection(
    serve: Callable[[Handler], Awaitable[tuple[str, str, Server]]],
) -> None:
    """A submit storm must not open a connection per submit: sequential requests share one."""
    tcp, _, server = await serve(echo)
    client = AiohttpClient(tcp, 5)
    try:
        for _ in range(5):
            await client.request("GET", "/slurm/v0.0.38/ping", headers={})
        await asyncio.gather(*(client.request("GET", "/slurm/v0.0.38/ping", headers={}) for _ in range(16)))
    finally:
        await client.aclose()
    assert len(set(server.peers[:5])) == 1
    assert len(set(server.peers)) <= 16


async def test_a_connection_the_server_closed_is_not_reused(
    serve: Callable[[Handler], Awaitable[tuple[str, str, Server]]],
) -> None:
    async def close_after(request: web.Request) -> web.Response:
        return web.Response(text="{}", headers={"Connection": "close"})

    tcp, _, server = await serve(close_after)
    client = AiohttpClient(tcp, 5)
    try:
        for _ in range(3):
            assert (await client.request("GET", "/slurm/v0.0.38/ping", headers={})).status == 200
    finally:
        await client.aclose()
    assert len(set(server.peers)) == 3


async def test_no_server_is_a_failure_not_a_timeout() -> None:
    client = AiohttpClient(f"http://127.0.0.1:{free_port()}", 5)
    try:
        with pytest.raises(HttpFailure) as info:
            await client.request("GET", "/openapi/v3", headers={})
        assert not info.value.timeout
    finally:
        await client.aclose()


async def test_no_answer_in_time_is_a_timeout(serve: Callable[[Handler], Awaitable[tuple[str, str, Server]]]) -> None:
    released = asyncio.Event()

    async def stall(request: web.Request) -> web.Response:
        await released.wait()
        return web.Response(text="{}")

    tcp, _, _ = await serve(stall)
    client = AiohttpClient(tcp, 0.3)
    try:
        with pytest.raises(HttpFailure, match=r"no answer in 0\.3 s") as info:
            await client.request("POST", "/slurm/v0.0.38/job/submit", headers={}, body={})
        assert info.value.timeout
    finally:
        released.set()
        await client.aclose()


@pytest.mark.parametrize(("url", "ca_file", "words"), [
    ("ftp://restd:6820", "", "expected https://"),
    ("restd:6820", "", "expected https://"),
    ("http://127.0.0.1:6820", "/etc/ssl/certs/ca-certificates.crt", "is not https://"),
    ("https://restd:6820", "/nonexistent/ca.pem", "slurm.restd_ca_file /nonexistent/ca.pem"),
])  # fmt: skip
def test_bad_settings_are_refused_before_any_request(url: str, ca_file: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        AiohttpClient(url, 5, ca_file=ca_file)
