"""HTTP to slurmrestd: one request in, one :class:`Reply` out (status and body bytes).

The slurmrestd backend (``clusterd.slurm.restd``) speaks Slurm's REST API through :class:`RestdHttp`;
:class:`AiohttpClient` is the concrete client. aiohttp because a submit storm is where its cost
shows: over 16 concurrent keep-alive requests it spends about 0.1 ms of Python per request where
httpx spent about 1 ms (bench/README.md), and every millisecond of clusterd's single event loop is
a millisecond no other submit gets.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp


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
    """What the slurmrestd backend needs of HTTP (a test gives a fake; clusterd an AiohttpClient)."""

    async def request(self, method: str, path: str, *, headers: dict[str, str], body: Any = None) -> Reply:
        """``body`` is sent as JSON when not None. Raises :class:`HttpFailure` when no answer comes."""
        ...

    async def aclose(self) -> None: ...


class AiohttpClient:
    """Keep-alive connections to one slurmrestd: ``unix:///path``, ``https://`` (verified against
    ``ca_file`` or the system CAs) or ``http://`` (which clusterd.security.transport allows on
    loopback only). The URL is checked here (ValueError); the session opens on the first request,
    inside the event loop that uses it."""

    def __init__(self, url: str, timeout: float, *, ca_file: str = "") -> None:
        self._ssl: ssl.SSLContext | bool = False
        self._unix = ""
        if url.startswith("unix://"):
            self._unix, self._base = url.removeprefix("unix://"), "http://slurmrestd"
        elif url.startswith(("http://", "https://")):
            self._base = url.rstrip("/")
        else:
            raise ValueError(f"slurm.restd_url {url!r}: expected https://host:port, http://host:port or unix:///path")
        if ca_file and not url.startswith("https://"):
            raise ValueError(f"slurm.restd_ca_file is set but slurm.restd_url {url!r} is not https://")
        if url.startswith("https://"):
            try:
                self._ssl = ssl.create_default_context(cafile=ca_file or None)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"slurm.restd_ca_file {ca_file}: {exc}") from exc
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector: aiohttp.BaseConnector = (
            aiohttp.UnixConnector(path=self._unix) if self._unix else aiohttp.TCPConnector(ssl=self._ssl)
        )
        return aiohttp.ClientSession(connector=connector, timeout=self._timeout)

    async def request(self, method: str, path: str, *, headers: dict[str, str], body: Any = None) -> Reply:
        if self._session is None:
            self._session = self._open()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers = {**headers, "Content-Type": "application/json"}
        try:
            async with self._session.request(method, self._base + path, headers=headers, data=data) as resp:
                return Reply(resp.status, resp.reason or "", await resp.read())
        except TimeoutError as exc:
            raise HttpFailure(f"no answer in {self._timeout.total:g} s", timeout=True) from exc
        except aiohttp.ClientError as exc:
            raise HttpFailure(repr(exc)) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
