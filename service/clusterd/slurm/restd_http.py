"""HTTP to slurmrestd: one request in, one :class:`Reply` out (status and body bytes).

The slurmrestd backend (``clusterd.slurm.restd``) speaks Slurm's REST API through :class:`RestdHttp`;
:class:`H11Client` is the concrete client: h11 parses HTTP/1.1, asyncio streams carry it, and idle
keep-alive connections wait in a list. Why not a full client library:

- slurmrestd 26.05 follows some error answers it closes on (``Connection: Close``) with a second,
  plain-text copy. An answer is read exactly to its end and what follows is never parsed, so that
  copy is dropped with the connection; aiohttp's client parses every byte it receives and, when
  both copies arrive in one read, fails the whole request with "Data after `Connection: close`",
  losing Slurm's words (and the submit's outcome) to a race.
- A submit storm is where a client's cost shows, and every millisecond of clusterd's one event loop
  is a millisecond no other submit gets: httpx, which reads the doubled answer right, costs 4.5-11x
  what this does per request, over TCP and a unix socket (``python -m bench.restd_http``, which
  runs all three side by side; bench/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import h11


@dataclass(frozen=True)
class Reply:
    """An HTTP answer, read whole (slurmrestd's answers are JSON documents)."""

    status: int
    reason: str
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON; ValueError when it is not."""
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class HttpFailure(Exception):
    """No answer: the connection failed, broke, or the request timed out (``timeout``)."""

    def __init__(self, detail: str, *, timeout: bool = False) -> None:
        super().__init__(detail)
        self.timeout = timeout


class RestdHttp(Protocol):
    """What the slurmrestd backend needs of HTTP (a test gives a fake; clusterd an H11Client)."""

    async def request(self, method: str, path: str, *, headers: dict[str, str], body: Any = None) -> Reply:
        """``body`` is sent as JSON when not None. Raises :class:`HttpFailure` when no answer comes."""
        ...

    async def aclose(self) -> None: ...


class H11Client:
    """Keep-alive connections to one slurmrestd: ``unix:///path``, ``https://`` (verified against
    ``ca_file`` or the system CAs) or ``http://`` (which clusterd.security.transport allows on
    loopback only). The URL is checked here (ValueError); connections open on demand, inside the
    event loop that uses them, and wait idle for the next request until the server closes them."""

    def __init__(self, url: str, timeout: float, *, ca_file: str = "") -> None:
        self._ssl: ssl.SSLContext | None = None
        self._unix, self._prefix, self._address = "", "", ("", 0)
        if url.startswith("unix://"):
            self._unix, self._host = url.removeprefix("unix://"), "slurmrestd"
        elif url.startswith(("http://", "https://")):
            parts = urlsplit(url)
            try:
                port = parts.port or (443 if parts.scheme == "https" else 80)
            except ValueError as exc:
                raise ValueError(f"slurm.restd_url {url!r}: {exc}") from exc
            if not parts.hostname:
                raise ValueError(f"slurm.restd_url {url!r}: no host")
            # A path is a prefix: slurmrestd behind a proxy that routes on one.
            self._host, self._address, self._prefix = parts.netloc, (parts.hostname, port), parts.path.rstrip("/")
        else:
            raise ValueError(f"slurm.restd_url {url!r}: expected https://host:port, http://host:port or unix:///path")
        if ca_file and not url.startswith("https://"):
            raise ValueError(f"slurm.restd_ca_file is set but slurm.restd_url {url!r} is not https://")
        if url.startswith("https://"):
            try:
                self._ssl = ssl.create_default_context(cafile=ca_file or None)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"slurm.restd_ca_file {ca_file}: {exc}") from exc
        self._timeout = timeout
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(_MAX_CONNECTIONS)
        self._closed = False

    async def request(self, method: str, path: str, *, headers: dict[str, str], body: Any = None) -> Reply:
        content = b"" if body is None else json.dumps(body).encode()
        head = [("Host", self._host), *headers.items(), ("Content-Length", str(len(content)))]
        if body is not None:
            head.append(("Content-Type", "application/json"))
        request = h11.Request(method=method, target=self._prefix + path, headers=head)
        try:
            async with asyncio.timeout(self._timeout), self._slots:
                while conn := self._reusable():
                    try:
                        return await self._exchange(conn, request, content)
                    except _Unanswered:
                        # Closed by the server while idle, most likely: send again where that is
                        # safe (RFC 9112 9.3.1); a POST (a submit) might have been read, so it fails.
                        if method not in _IDEMPOTENT:
                            raise
                return await self._exchange(await self._connect(), request, content)
        except TimeoutError as exc:
            raise HttpFailure(f"no answer in {self._timeout:g} s", timeout=True) from exc
        except (OSError, h11.ProtocolError, _Unanswered) as exc:
            raise HttpFailure(repr(exc)) from exc

    def _reusable(self) -> _Connection | None:
        """The most recently used idle connection still open and not idle for long (a server or
        proxy closes idle connections after its own timeout; a submit storm reuses them in ms)."""
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < _IDLE_EXPIRY:
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        if self._unix:
            return _Connection(*await asyncio.open_unix_connection(self._unix))
        host, port = self._address
        return _Connection(*await asyncio.open_connection(host, port, ssl=self._ssl))

    async def _exchange(self, conn: _Connection, request: h11.Request, content: bytes) -> Reply:
        try:
            reply = await conn.exchange(request, content)
        except BaseException:  # a failure or a cancel (the timeout) leaves it mid-exchange
            conn.close()
            raise
        if conn.recycle() and not self._closed:
            self._idle.append(conn)
        else:
            conn.close()
        return reply

    async def aclose(self) -> None:
        """Closes the idle connections; one still in use closes when its request ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        for conn in idle:
            await conn.wait_closed()


_READ = 256 * 1024
# Requests in flight at once, each on its own connection (more wait, inside their timeout): a
# burst of submits must not open a connection each and exhaust slurmrestd's own limit
# (--max-connections); 64 is well past what 16 concurrent clients need.
_MAX_CONNECTIONS = 64
# Seconds. slurmrestd itself keeps an idle connection open (22.05: still answering after 60 s);
# a proxy in front of it may not (Apache's default keep-alive timeout is 5 s).
_IDLE_EXPIRY = 4.0
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


class _Unanswered(Exception):
    """The connection ended or failed before a byte of the answer."""


class _Connection:
    """One HTTP/1.1 connection: h11 keeps its state, asyncio streams carry the bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0

    @property
    def closed(self) -> bool:
        return self._reader.at_eof() or self._writer.is_closing()

    async def exchange(self, request: h11.Request, content: bytes) -> Reply:
        send = self._h11.send
        try:
            self._writer.write(
                b"".join(
                    filter(
                        None,
                        (send(request), send(h11.Data(data=content)) if content else b"", send(h11.EndOfMessage())),
                    )
                )
            )
            await self._writer.drain()
            data = await self._reader.read(_READ)
        except OSError as exc:
            raise _Unanswered(f"the connection failed before an answer: {exc!r}") from exc
        if not data:
            raise _Unanswered("the connection closed before an answer")
        self._h11.receive_data(data)
        response: h11.Response | None = None
        chunks: list[bytes] = []
        while True:
            event = self._h11.next_event()
            if event is h11.NEED_DATA:
                self._h11.receive_data(await self._reader.read(_READ))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage) and response is not None:
                return Reply(response.status_code, response.reason.decode("latin-1"), b"".join(chunks))
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("the connection closed before the answer ended")

    def recycle(self) -> bool:
        """After a complete exchange, whether both sides kept the connection alive (bytes the server
        sent past its answer, as slurmrestd 26.05 does after an error it closes on, are never read)."""
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            self.idle_since = time.monotonic()
            return not self.closed
        return False

    def close(self) -> None:
        self._writer.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
