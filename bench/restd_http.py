"""What clusterd's slurmrestd HTTP client costs per request, against aiohttp's and httpx's clients.

Each client sends the same small JSON POST to one stub HTTP/1.1 server in this process, over loopback
TCP and over a unix socket (the two ways the backend reaches slurmrestd), sequentially and from 16
concurrent tasks; the clients take turns in forward then reverse order (ABC CBA) so that drift
cancels. The stub's own cost is in every figure, so ratios understate the clients' difference
rather than overstate it. No Slurm, no stack: this is the client's share of a submit, not a submit.
Each client is also sent slurmrestd 26.05's doubled error answer (both copies in one read): a
client that loses the first answer to it cannot serve the backend, whatever it costs.

    pip install httpx                         # the bench alone needs it; clusterd does not
    python -m bench.restd_http               # 3,000 requests per figure, 16 tasks
    python -m bench.restd_http --requests 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path

import aiohttp
import httpx

from clusterd.slurm.restd_http import H11Client
from tests.support.raw_http import RawServer, ok, raw_server

ANSWER = b'{"job_id": 1, "step_id": "batch", "errors": [], "warnings": []}'
BODY = {"job": {"name": "bench", "script": "#!/bin/sh\ntrue\n"}}
SUBMIT = "/slurm/v0.0.42/job/submit"
HEADERS = {"X-SLURM-USER-NAME": "u"}
# slurmrestd 26.05 on a refused update: the answer, then a plain-text copy on a connection it closes.
_REFUSAL = b'{"errors": [{"error": "Job is no longer pending execution", "error_number": 2073}]}'
DOUBLED = (
    b"HTTP/1.1 422 UNPROCESSABLE CONTENT\r\nConnection: Close\r\nContent-Length: %d\r\n"
    b"Content-Type: application/json\r\n\r\n%s"
    b"HTTP/1.1 422 UNPROCESSABLE CONTENT\r\nConnection: Close\r\nContent-Length: 34\r\n"
    b"Content-Type: text/plain\r\n\r\nJob is no longer pending execution"
) % (len(_REFUSAL), _REFUSAL)
Post = Callable[[], Awaitable[tuple[int, bytes]]]


class Clients:
    """The three clients, each with a kept-alive pool of up to 64 connections to one server."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ours = H11Client(url, 10)
        unix = url.removeprefix("unix://") if url.startswith("unix://") else ""
        self.base = "http://slurmrestd" if unix else url
        connector = aiohttp.UnixConnector(unix, limit=64) if unix else aiohttp.TCPConnector(limit=64)
        self.session = aiohttp.ClientSession(connector=connector)
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        self.httpx = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=unix or None, limits=limits))

    def posts(self, path: str = SUBMIT) -> dict[str, Post]:
        async def ours() -> tuple[int, bytes]:
            reply = await self.ours.request("POST", path, headers=HEADERS, body=BODY)
            return reply.status, reply.body

        async def via_aiohttp() -> tuple[int, bytes]:
            async with self.session.post(self.base + path, headers=HEADERS, json=BODY) as r:
                return r.status, await r.read()

        async def via_httpx() -> tuple[int, bytes]:
            r = await self.httpx.post(self.base + path, headers=HEADERS, json=BODY)
            return r.status_code, r.content

        return {"clusterd (h11)": ours, "aiohttp": via_aiohttp, "httpx": via_httpx}

    async def aclose(self) -> None:
        await self.ours.aclose()
        await self.session.close()
        await self.httpx.aclose()


async def _per_request_ms(post: Post, requests: int, tasks: int) -> float:
    left = [requests]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await post()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return (time.perf_counter() - start) / requests * 1e3


async def _doubled(post: Post) -> str:
    """Whether the client returns the first of slurmrestd's doubled answers, three times running."""
    try:
        for _ in range(3):
            status, body = await post()
            if status != 422 or json.loads(body)["errors"][0]["error_number"] != 2073:
                return f"wrong answer {status}"
    except Exception as exc:  # what each library raises differs: any is a failure here
        return f"fails: {str(getattr(exc, 'message', exc)).splitlines()[0][:40]}"
    return "ok"


async def _server(kind: str, directory: Path) -> RawServer:
    def answer(line: bytes) -> bytes:
        return DOUBLED if b"/job/103" in line else ok(ANSWER)

    return await raw_server(answer, unix=str(directory / "restd.sock") if kind == "unix" else "")


async def run(requests: int, tasks: int) -> None:
    print(
        f"restd_http bench: {requests} POSTs per figure, ABC/CBA halves, a stub server in this process; "
        f"h11 {version('h11')}, aiohttp {version('aiohttp')}, httpx {version('httpx')}"
    )
    print(f"{'':22}{'sequential ms':>14}{'vs ours':>9}{f'{tasks} tasks ms':>14}{'vs ours':>9}  doubled answer")
    for kind in ("tcp", "unix"):
        with tempfile.TemporaryDirectory(prefix="restd-bench-") as tmp:
            server = await _server(kind, Path(tmp))
            clients = Clients(server.url)
            try:
                posts = clients.posts()
                figures: dict[str, list[list[float]]] = {name: [[], []] for name in posts}
                for order in (list(posts), list(posts)[::-1]):
                    for name in order:
                        figures[name][0].append(await _per_request_ms(posts[name], requests // 2, 1))
                        figures[name][1].append(await _per_request_ms(posts[name], requests // 2, tasks))
                doubled = {name: await _doubled(post) for name, post in clients.posts("/slurm/v0.0.42/job/103").items()}
                anchor = [statistics.mean(halves) for halves in figures["clusterd (h11)"]]
                for name, (seq, conc) in figures.items():
                    s, c = statistics.mean(seq), statistics.mean(conc)
                    print(
                        f"{kind + ' ' + name:22}{s:14.3f}{s / anchor[0]:8.2f}x{c:14.3f}{c / anchor[1]:8.2f}x"
                        f"  {doubled[name]}"
                    )
            finally:
                await clients.aclose()
                server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=3000, help="requests per figure (default 3000)")
    parser.add_argument("--tasks", type=int, default=16, help="concurrent tasks (default 16)")
    args = parser.parse_args()
    asyncio.run(run(args.requests, args.tasks))


if __name__ == "__main__":
    main()
