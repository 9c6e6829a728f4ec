"""The slurmrestd backend's HTTP client over real sockets (an aiohttp server on loopback and on a
unix socket): what it sends, what it returns, keep-alive, and how a missing answer looks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from clusterd.slurm import restd_http
from clusterd.slurm.restd_http import H11Client, HttpFailure
from tests.support.ports import free_port
from tests.support.raw_http import ok, raw_server

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
async def test_a_json_request_and_its_answer(
    serve: Callable[[Handler], Awaitable[tuple[str, str, Server]]], which: str
) -> None:
    tcp, unix, _ = await serve(echo)
    client = H11Client(tcp if which == "tcp" else unix, 5)
    try:
        reply = await client.request(
            "POST", "/slurm/v0.0.38/job/submit", headers={"X-SLURM-USER-NAME": "alice"}, body={"job": {"name": "x"}}
        )
        assert (reply.status, reply.reason) == (200, "OK")
        assert reply.json() == {
            "method": "POST",
            "path": "/slurm/v0.0.38/job/submit",
            "user": "alice",
            "type": "application/json",
            "body": {"job": {"name": "x"}},
        }
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
    client = H11Client(tcp + "/", 5)  # a trailing slash is not doubled
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
    client = H11Client(tcp, 5)
    try:
        for _ in range(5):
            await client.request("GET", "/slurm/v0.0.38/ping", headers={})
        await asyncio.gather(*(client.request("GET", "/slurm/v0.0.38/ping", headers={}) for _ in range(16)))
    finally:
        await client.aclose()
    assert len(set(server.peers[:5])) == 1
    assert len(set(server.peers)) <= 16


async def test_a_burst_waits_for_a_connection_rather_than_opening_one_each(
    serve: Callable[[Handler], Awaitable[tuple[str, str, Server]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(restd_http, "_MAX_CONNECTIONS", 4)
    running, peak = 0, 0

    async def slow(request: web.Request) -> web.Response:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return web.Response(text="{}")

    tcp, _, server = await serve(slow)
    client = H11Client(tcp, 5)
    try:
        replies = await asyncio.gather(*(client.request("GET", "/slurm/v0.0.38/ping", headers={}) for _ in range(20)))
    finally:
        await client.aclose()
    assert {r.status for r in replies} == {200}
    assert peak == 4 and len(set(server.peers)) == 4


async def test_a_connection_the_server_closed_is_not_reused(
    serve: Callable[[Handler], Awaitable[tuple[str, str, Server]]],
) -> None:
    async def close_after(request: web.Request) -> web.Response:
        return web.Response(text="{}", headers={"Connection": "close"})

    tcp, _, server = await serve(close_after)
    client = H11Client(tcp, 5)
    try:
        for _ in range(3):
            assert (await client.request("GET", "/slurm/v0.0.38/ping", headers={})).status == 200
    finally:
        await client.aclose()
    assert len(set(server.peers)) == 3


async def test_no_server_is_a_failure_not_a_timeout() -> None:
    client = H11Client(f"http://127.0.0.1:{free_port()}", 5)
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
    client = H11Client(tcp, 0.3)
    try:
        with pytest.raises(HttpFailure, match=r"no answer in 0\.3 s") as info:
            await client.request("POST", "/slurm/v0.0.38/job/submit", headers={}, body={})
        assert info.value.timeout
    finally:
        released.set()
        await client.aclose()


@pytest.mark.parametrize(
    ("url", "ca_file", "words"),
    [
        ("ftp://restd:6820", "", "expected https://"),
        ("restd:6820", "", "expected https://"),
        ("http://127.0.0.1:6820", "/etc/ssl/certs/ca-certificates.crt", "is not https://"),
        ("https://restd:6820", "/nonexistent/ca.pem", "slurm.restd_ca_file /nonexistent/ca.pem"),
    ],
)
def test_bad_settings_are_refused_before_any_request(url: str, ca_file: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        H11Client(url, 5, ca_file=ca_file)


async def test_a_path_in_the_url_prefixes_every_request(
    serve: Callable[[Handler], Awaitable[tuple[str, str, Server]]],
) -> None:
    """slurmrestd behind a proxy that routes on a path prefix."""
    tcp, _, _ = await serve(echo)
    client = H11Client(tcp + "/restd/", 5)
    try:
        reply = await client.request("GET", "/slurm/v0.0.40/ping", headers={})
        assert reply.json()["path"] == "/restd/slurm/v0.0.40/ping"
    finally:
        await client.aclose()


async def test_a_chunked_answer_is_read_whole(serve: Callable[[Handler], Awaitable[tuple[str, str, Server]]]) -> None:
    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in (b'{"jobs": [', b"1, 2", b"]}"):
            await response.write(part)
        await response.write_eof()
        return response

    tcp, _, _ = await serve(chunked)
    client = H11Client(tcp, 5)
    try:
        assert (await client.request("GET", "/slurm/v0.0.40/jobs", headers={})).json() == {"jobs": [1, 2]}
    finally:
        await client.aclose()


# What slurmrestd 26.05.5 sent for a refused job update, byte for byte apart from the JSON document:
# the answer, then a plain-text copy on the connection it had said it would close.
DOUBLED = (
    b"HTTP/1.1 422 UNPROCESSABLE CONTENT\r\nConnection: Close\r\nContent-Length: %d\r\n"
    b"Content-Type: application/json\r\n\r\n%s"
    b"HTTP/1.1 422 UNPROCESSABLE CONTENT\r\nConnection: Close\r\nContent-Length: 34\r\n"
    b"Content-Type: text/plain\r\n\r\nJob is no longer pending execution"
)


async def test_a_second_answer_after_connection_close_is_dropped() -> None:
    """slurmrestd 26.05's doubled error answer, both copies in one read: the first is the answer
    (status and Slurm's words), the copy goes with the connection, and the next request is fine."""
    refusal = json.dumps({"errors": [{"error": "Job is no longer pending execution", "error_number": 2073}]}).encode()

    def answer(line: bytes) -> bytes:
        if b"/job/103" in line:
            return DOUBLED % (len(refusal), refusal)
        return ok(b"{}")

    server = await raw_server(answer)
    client = H11Client(server.url, 5)
    try:
        for _ in range(3):
            reply = await client.request("POST", "/slurm/v0.0.42/job/103", headers={}, body={"begin_time": 1})
            assert (reply.status, reply.reason) == (422, "UNPROCESSABLE CONTENT")
            assert reply.json()["errors"][0]["error_number"] == 2073
            assert (await client.request("GET", "/slurm/v0.0.42/ping", headers={})).status == 200
    finally:
        await client.aclose()
        server.close()
    # Each refusal closes its connection, so each ping opens one, which the next refusal reuses.
    assert len(server.accepted) == 4


async def test_a_kept_alive_connection_closed_while_idle_is_replaced() -> None:
    """A server that closes each connection after its answer without saying so: the request that
    finds its idle connection closed goes out on a new one (the server had read none of it)."""
    server = await raw_server(lambda line: ok(b"{}"), close_after=True)
    client = H11Client(server.url, 5)
    try:
        for _ in range(3):
            assert (await client.request("GET", "/slurm/v0.0.42/ping", headers={})).status == 200
    finally:
        await client.aclose()
        server.close()
    assert len(server.accepted) == 3


@pytest.mark.parametrize(("method", "sent"), [("GET", 3), ("POST", 2)])
async def test_only_an_idempotent_request_is_sent_again(method: str, sent: int) -> None:
    """A kept-alive connection that closes on the next request without an answer: a GET goes out
    again on a new connection; a POST (a submit, which the server may have acted on) fails."""
    seen: list[bytes] = []

    def answer(line: bytes) -> bytes | None:
        seen.append(line)
        return None if len(seen) == 2 else ok(b"{}")

    server = await raw_server(answer)
    client = H11Client(server.url, 5)
    try:
        assert (await client.request(method, "/slurm/v0.0.42/job/submit", headers={}, body={})).status == 200
        if method == "GET":
            assert (await client.request(method, "/slurm/v0.0.42/job/submit", headers={}, body={})).status == 200
        else:
            with pytest.raises(HttpFailure, match="closed before an answer"):
                await client.request(method, "/slurm/v0.0.42/job/submit", headers={}, body={})
    finally:
        await client.aclose()
        server.close()
    assert len(seen) == sent


async def test_a_connection_idle_too_long_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restd_http, "_IDLE_EXPIRY", 0.0)
    server = await raw_server(lambda line: ok(b"{}"))
    client = H11Client(server.url, 5)
    try:
        for _ in range(3):
            assert (await client.request("POST", "/slurm/v0.0.42/job/submit", headers={}, body={})).status == 200
    finally:
        await client.aclose()
        server.close()
    assert len(server.accepted) == 3


async def test_no_answer_on_a_new_connection_is_a_failure() -> None:
    server = await raw_server(lambda line: None)
    client = H11Client(server.url, 5)
    try:
        with pytest.raises(HttpFailure, match="closed before an answer") as info:
            await client.request("POST", "/slurm/v0.0.42/job/submit", headers={}, body={})
        assert not info.value.timeout
    finally:
        await client.aclose()
        server.close()
