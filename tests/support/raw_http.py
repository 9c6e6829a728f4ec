"""A bare HTTP/1.1 server on loopback that writes exactly the bytes it is told to.

For what a real HTTP server library will not send: two answers in one write, a kept-alive
connection closed without a word. The slurmrestd client's tests and ``bench.restd_http`` use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class RawServer:
    """``url`` to reach it; ``accepted`` counts the connections it took."""

    url: str
    server: asyncio.Server
    accepted: list[int] = field(default_factory=list)

    def close(self) -> None:
        self.server.close()


def ok(body: bytes) -> bytes:
    """A kept-alive 200 with a JSON body."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


async def raw_server(
    answer: Callable[[bytes], bytes | None], *, close_after: bool = False, unix: str = ""
) -> RawServer:
    """Answers each request with ``answer(request_line)`` in one write. None closes the connection
    without an answer; so does ``close_after`` after every answer, and an answer that says
    ``Connection: Close``. On loopback TCP, or on the unix socket ``unix`` (url ``unix://PATH``)."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while line := await reader.readline():
                length = 0
                while (header := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = header.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                out = answer(line)
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
                if close_after or b"Connection: Close" in out:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    if unix:
        return RawServer(f"unix://{unix}", await asyncio.start_unix_server(handle, unix), accepted)
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return RawServer(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", server, accepted)
