"""A bounded HTTP/1.1 listener for an aiohttp.web application, on clusterd's own event loop.

aiohttp parses and answers; this module decides which connections it gets and how long they may
take, because a local user can otherwise pile up connections and hold each one forever by sending
a header byte now and then. A connection costs a protocol object and its socket, never a thread.
The bounds:

* at most ``max_connections`` connections at once; at the cap nothing more is accepted (further
  clients wait in the kernel's listen queue, costing clusterd nothing);
* at most ``max_connections_per_client`` per client (:class:`clusterd.web.peers.PeerKeys`: a local
  user by uid, else the address); beyond it a connection is answered 503 and closed at once, so
  one user's flood cannot take the others' places (what waits in the queue is drained in batches,
  so refusing keeps up with a flood);
* the TLS handshake and the request head and body must arrive within ``request_timeout_seconds``
  of the connection or of the previous answer, or the connection is closed, with a 408 when part
  of a request had come (slow-loris); the same limit ends an idle kept-alive connection;
* a request line or header line of at most 8 KiB and at most 32 header fields (431), a body of
  at most 64 KiB (413; the dashboard is read-only);
* at most 32 requests pipelined behind the one being answered: beyond them aiohttp stops reading
  the socket until the queue drains;
* an answer must be taken by the client within 30 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.typedefs import Handler, Middleware

from clusterd.web.peers import GONE, PeerKeys

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 8190  # the request line, and each header line
MAX_HEADERS = 32
MAX_BODY_BYTES = 64 << 10
_SEND_TIMEOUT = 30.0
_ACCEPT_BATCH = 64
BACKLOG = 1024  # the kernel queue clients wait in while every connection is taken (capped by somaxconn)
_REFUSED = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_LATE = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True)
class Limits:
    max_connections: int = 128
    max_connections_per_client: int = 16
    request_timeout_seconds: float = 10.0


def application(middlewares: Iterable[Middleware] = ()) -> web.Application:
    """An application :class:`HttpListener` can serve: bodies capped, the per-request deadlines and
    the answer's send timeout applied before ``middlewares`` and the routes see a request."""
    return web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_bounded, *middlewares])


class _Connection(web.RequestHandler):
    """aiohttp's protocol for one connection, plus its deadline and its place in the bounds."""

    def __init__(self, manager: web.Server, *, due: float, timeout: float, release: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        super().__init__(
            manager,
            loop=loop,
            # aiohttp's own idle limit stays behind ours, which also answers a half-sent request.
            keepalive_timeout=timeout + 1.0,
            access_log=None,  # type: ignore[arg-type]  # None: no access log, which aiohttp allows
            max_line_size=MAX_LINE_BYTES,
            max_field_size=MAX_LINE_BYTES,
            max_headers=MAX_HEADERS,
            lingering_time=0,  # an unread body ends the connection rather than being read out
        )
        self.due = due
        self._timeout = timeout
        self._release = release
        self._clock = loop
        self._timer: asyncio.TimerHandle | None = None
        self._busy = False
        self._partial = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._timer = self._clock.call_at(self.due, self._expire)

    def data_received(self, data: bytes) -> None:
        if data and not self._busy:
            self._partial = True
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        super().connection_lost(exc)
        self._release()

    def head_arrived(self) -> None:
        """The request's head is in: its body has what is left of the deadline, the answer no limit."""
        self._busy = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def answered(self) -> None:
        """The next request (or the idle keep-alive) has a deadline from now."""
        self._busy = self._partial = False
        self.due = self._clock.time() + self._timeout
        self._timer = self._clock.call_at(self.due, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self._busy or self.transport is None:
            return
        if self._partial:
            with contextlib.suppress(RuntimeError, OSError):
                self.transport.write(_LATE)
        self.force_close()

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        """A request aiohttp could not parse (or a route that failed): answered and closed, without
        a traceback in the log for what is a client's mistake; an oversized head is 431."""
        if isinstance(exc, LineTooLong) or (isinstance(exc, BadHttpMessage) and "Too many headers" in str(exc)):
            status, message = 431, "request head too large"
        if status >= 500:
            log.error("HTTP request failed", exc_info=exc)
        else:
            log.debug("bad HTTP request: %s", message or exc)
        if request.writer.output_size > 0:  # an answer has begun: nothing better than closing
            raise ConnectionError("the answer was under way")
        response = web.Response(status=status, text=f"{message or status}\n")
        response.force_close()
        return response


@web.middleware
async def _bounded(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The body within the request's deadline (408, 413 beyond 64 KiB), the answer out within 30 s."""
    conn = request.protocol
    if not isinstance(conn, _Connection):  # served by an aiohttp runner of its own: no bounds to keep
        return await handler(request)
    conn.head_arrived()
    response: web.StreamResponse
    try:
        if request.body_exists:
            async with asyncio.timeout_at(conn.due):
                await request.read()
        response = await handler(request)
    except TimeoutError:
        response = web.Response(status=408, text="the request did not arrive in time\n")
        response.force_close()
    except web.HTTPRequestEntityTooLarge:
        response = web.Response(status=413, text="request body too large\n")
        response.force_close()
    except web.HTTPException as exc:  # a route's own answer (404, 405 ...): sent here, so the deadline re-arms
        response = web.Response(status=exc.status, reason=exc.reason, text=exc.text, headers=exc.headers)
    except BaseException:
        conn.answered()  # aiohttp answers 500 and may keep the connection: its next request has a deadline
        raise
    try:
        async with asyncio.timeout(_SEND_TIMEOUT):
            await response.prepare(request)
            await response.write_eof()
    except TimeoutError:
        conn.force_close()  # the client does not take its answer
        return response
    conn.answered()
    return response


class HttpListener:
    """Serves ``app`` (made by :func:`application`) on an already bound, listening ``sock``, in the
    running event loop, from :meth:`start` until :meth:`stop`."""

    def __init__(
        self,
        sock: socket.socket,
        app: web.Application,
        *,
        limits: Limits,
        tls: ssl.SSLContext | None = None,
        cleanup: Callable[[], None] | None = None,
    ) -> None:
        if _bounded not in app.middlewares:
            raise ValueError("HttpListener serves an application made by clusterd.web.listener.application")
        self._sock = sock
        self._limits = limits
        self._tls = tls
        self._cleanup = cleanup
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
        self._per_client: Counter[str] = Counter()
        self._keys = PeerKeys()
        self._slots = asyncio.Semaphore(max(1, limits.max_connections))
        self._opening: set[asyncio.Task[None]] = set()
        self._accepting: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        """The TCP port (0 for a unix socket)."""
        name = self._sock.getsockname()
        return int(name[1]) if isinstance(name, tuple) else 0

    async def start(self) -> None:
        await self._runner.setup()
        self._sock.setblocking(False)
        self._accepting = asyncio.create_task(self._accept())

    async def stop(self) -> None:
        """Stops accepting, ends every connection (an answer under way gets 2 s), unlinks a unix socket."""
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
        for task in list(self._opening):
            task.cancel()
        await asyncio.gather(*self._opening, return_exceptions=True)
        await self._runner.cleanup()
        self._keys.close()
        self._sock.close()
        if self._cleanup is not None:
            self._cleanup()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        slots = self._slots
        while True:
            await slots.acquire()  # at the cap, new clients wait in the kernel's queue
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:  # EMFILE and the like: wait, rather than spin on the error
                slots.release()
                log.warning("HTTP accept failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            self._admit(conn)
            # Whatever else waits in the queue, without a trip through the loop each: under a
            # flood, refusing fast is what keeps the queue short for everyone else.
            for _ in range(_ACCEPT_BATCH):
                if slots.locked():
                    break
                try:
                    conn, _ = self._sock.accept()
                except OSError:  # BlockingIOError: the queue is empty
                    break
                await slots.acquire()  # free: returns at once
                self._admit(conn)

    def _admit(self, conn: socket.socket) -> None:
        """Serve ``conn``, or refuse it when its client holds its share already (its slot is taken)."""
        try:
            key = self._keys.key(conn)
        except OSError:  # it left already
            key = GONE
        if key == GONE:
            conn.close()
            self._slots.release()
            return
        if self._per_client[key] >= self._limits.max_connections_per_client:
            self._refuse(conn)
            self._slots.release()
            return
        self._per_client[key] += 1
        task = asyncio.create_task(self._open(conn, self._releaser(key)))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)

    def _releaser(self, key: str) -> Callable[[], None]:
        """Frees the connection's place, overall and its client's, once however often it is called."""
        done = False

        def release() -> None:
            nonlocal done
            if done:
                return
            done = True
            self._per_client[key] -= 1
            if self._per_client[key] <= 0:
                del self._per_client[key]
            self._slots.release()

        return release

    def _refuse(self, conn: socket.socket) -> None:
        """Answer 503 and close, without waiting: the client's unread bytes are dropped first, since
        closing over them would reset the connection and lose the answer."""
        conn.setblocking(False)
        with contextlib.suppress(OSError):
            conn.recv(1 << 16)
        if self._tls is None:
            with contextlib.suppress(OSError):
                conn.send(_REFUSED)  # a full buffer just gets the close
        conn.close()

    async def _open(self, conn: socket.socket, release: Callable[[], None]) -> None:
        """Hands ``conn`` to aiohttp, after the TLS handshake (within the first request's deadline)."""
        loop = asyncio.get_running_loop()
        timeout = self._limits.request_timeout_seconds
        due = loop.time() + timeout
        server = self._runner.server
        assert server is not None
        try:
            async with asyncio.timeout_at(due):
                await loop.connect_accepted_socket(
                    lambda: _Connection(server, due=due, timeout=timeout, release=release),
                    conn,
                    ssl=self._tls,
                    ssl_handshake_timeout=timeout if self._tls else None,
                )
        except (OSError, TimeoutError):  # no handshake in time, or a broken one (ssl.SSLError)
            conn.close()
            release()
        except asyncio.CancelledError:  # the listener is stopping
            conn.close()
            release()
            raise
