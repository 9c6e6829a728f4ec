"""What clusterd's slurmrestd HTTP client costs per request, against aiohttp, side by side.

Both clients send the same small JSON POST to one stub HTTP/1.1 server on loopback, in this
process, sequentially and from 16 concurrent tasks, alternating ABBA; the stub's own cost is in
every figure, so the ratio understates the clients' difference rather than overstating it.
No Slurm, no stack: this is the client's share of a submit, not a submit.

    python -m bench.restd_http               # 3,000 requests each way, 16 tasks
    python -m bench.restd_http --requests 10000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

import aiohttp

from clusterd.slurm.restd_http import H11Client
from tests.support.raw_http import ok, raw_server

ANSWER = b'{"job_id": 1, "step_id": "batch", "errors": [], "warnings": []}'
Post = Callable[[], Awaitable[object]]


async def _per_request_ms(post: Post, requests: int, tasks: int) -> float:
    left = [requests]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await post()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return (time.perf_counter() - start) / requests * 1e3


async def run(requests: int, tasks: int) -> None:
    server = await raw_server(lambda line: ok(ANSWER))
    url = server.url
    body = {"job": {"name": "bench", "script": "#!/bin/sh\ntrue\n"}}
    h11_client = H11Client(url, 10)
    session = aiohttp.ClientSession()

    async def via_h11() -> object:
        return await h11_client.request(
            "POST", "/slurm/v0.0.38/job/submit", headers={"X-SLURM-USER-NAME": "u"}, body=body
        )

    async def via_aiohttp() -> object:
        async with session.post(url + "/slurm/v0.0.38/job/submit", headers={"X-SLURM-USER-NAME": "u"}, json=body) as r:
            return await r.read()

    clients = {"clusterd (h11)": via_h11, "aiohttp": via_aiohttp}
    try:
        print(f"restd_http bench: {requests} POSTs per figure, ABBA halves, a stub server in this process")
        print(f"{'':16}{'sequential ms':>15}{'ratio':>8}{f'{tasks} tasks ms':>15}{'ratio':>8}")
        figures: dict[str, list[list[float]]] = {name: [[], []] for name in clients}
        for order in (list(clients), list(clients)[::-1]):
            for name in order:
                figures[name][0].append(await _per_request_ms(clients[name], requests // 2, 1))
                figures[name][1].append(await _per_request_ms(clients[name], requests // 2, tasks))
        anchor = [statistics.mean(halves) for halves in figures["aiohttp"]]
        for name, (seq, conc) in figures.items():
            s, c = statistics.mean(seq), statistics.mean(conc)
            print(f"{name:16}{s:15.3f}{s / anchor[0]:7.2f}x{c:15.3f}{c / anchor[1]:7.2f}x")
    finally:
        await h11_client.aclose()
        await session.close()
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=3000, help="requests per figure (default 3000)")
    parser.add_argument("--tasks", type=int, default=16, help="concurrent tasks (default 16)")
    args = parser.parse_args()
    asyncio.run(run(args.requests, args.tasks))


if __name__ == "__main__":
    main()
