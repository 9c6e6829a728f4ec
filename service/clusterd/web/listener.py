"""A bounded HTTP/1.1 server for WSGI apps: h11 parses, an asyncio loop of its own waits.

A thread per connection (wsgiref, socketserver) lets any local user pile up threads and descriptors
in clusterd with idle connections, and hold each one forever by sending a header byte now and then.
Here a connection costs a coroutine and its socket until the request is complete; only complete
requests reach the app, on a fixed pool of worker threads. The bounds:

* at most ``max_connections`` connections at once; at the cap nothing more is accepted (further
  clients wait in the kernel's listen queue, costing clusterd nothing);
* at most ``max_connections_per_client`` per client (:class:`clusterd.web.peers.PeerKeys`: a local
  user by uid, else the address); beyond it a connection is answered 503 and closed at once, so
  one user's flood cannot take the others' places (what waits in the queue is drained in batches,
  so refusing keeps up with a flood);
* the TLS handshake and the request head and body must arrive within ``request_timeout_seconds``
  of the connection or of the previous answer, or the connection is closed (slow-loris);
* a head of at most 16 KiB (431) and a body of at most 64 KiB (413; the dashboard is read-only);
* a response must be taken by the client within 30 s.

The loop runs in its own thread, never on clusterd's event loop: the app blocks (the dashboard
waits on the main loop for its answers, prometheus_client collects in place).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import socket
import ssl
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import h11

from clusterd.web.peers import GONE, PeerKeys

log = logging.getLogger(__name__)

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

MAX_HEAD_BYTES = 16 << 10
MAX_BODY_BYTES = 64 << 10
_SEND_TIMEOUT = 30.0
_ACCEPT_BATCH = 64
BACKLOG = 1024  # the kernel queue clients wait in while every connection is taken (capped by somaxconn)
_REFUSED = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True)
class Limits:
    max_connections: int = 128
    max_connections_per_client: int = 16
    request_timeout_seconds: float = 10.0
    workers: int = 20  # threads that run the app


class _Closed(Exception):
    """The client went away or broke the protocol: nothing more to answer."""


class HttpListener:
    """Serves ``app`` on an already bound, listening ``sock`` until :meth:`stop`."""

    def __init__(
        self,
        sock: socket.socket,
        app: Wsgi,
        *,
        limits: Limits,
        tls: ssl.SSLContext | None = None,
        cleanup: Callable[[], None] | None = None,
    ) -> None:
        self._sock = sock
        self._app = app
        self._limits = limits
        self._tls = tls
        self._cleanup = cleanup
        self._pool = ThreadPoolExecutor(max(1, limits.workers), thread_name_prefix="clusterd-http-app")
        self._per_client: Counter[str] = Counter()
        self._keys = PeerKeys()  # used on the listener's own thread only
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="clusterd-http", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    @property
    def port(self) -> int:
        """The TCP port (0 for a unix socket)."""
        name = self._sock.getsockname()
        return int(name[1]) if isinstance(name, tuple) else 0

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()
        if self._cleanup is not None:
            self._cleanup()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._sock.setblocking(False)
        self._ready.set()
        accepting = asyncio.create_task(self._accept())
        await self._stopping.wait()
        accepting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await accepting

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(max(1, self._limits.max_connections))
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                await slots.acquire()  # at the cap, new clients wait in the kernel's queue
                try:
                    conn, _ = await loop.sock_accept(self._sock)
                except OSError as exc:  # EMFILE and the like: wait, rather than spin on the error
                    slots.release()
                    log.warning("HTTP accept failed: %s", exc)
                    await asyncio.sleep(0.5)
                    continue
                self._admit(conn, slots, tasks)
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
                    self._admit(conn, slots, tasks)
        finally:
            self._keys.close()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _admit(self, conn: socket.socket, slots: asyncio.Semaphore, tasks: set[asyncio.Task[None]]) -> None:
        """Serve ``conn`` in a task of its own, or refuse it when its client holds its share already."""
        try:
            key = self._keys.key(conn)
        except OSError:  # it left already
            key = GONE
        if key == GONE:
            conn.close()
            slots.release()
            return
        if self._per_client[key] >= self._limits.max_connections_per_client:
            self._refuse(conn)
            slots.release()
            return
        self._per_client[key] += 1
        task = asyncio.create_task(self._connection(conn, key))
        tasks.add(task)
        task.add_done_callback(self._ended(tasks, key, slots))

    def _ended(
        self, tasks: set[asyncio.Task[None]], key: str, slots: asyncio.Semaphore
    ) -> Callable[[asyncio.Task[None]], None]:
        """A connection's done-callback: its place, overall and its client's, is free again."""

        def release(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            self._per_client[key] -= 1
            if self._per_client[key] <= 0:
                del self._per_client[key]
            slots.release()

        return release

    def _refuse(self, conn: socket.socket) -> None:
        """Answer 503 and close, without waiting: the client's unread bytes are dropped first, since
        closing over them would reset the connection and lose the answer."""
        conn.setblocking(False)
        with contextlib.suppress(OSError):
            conn.recv(MAX_HEAD_BYTES)
        if self._tls is None:
            with contextlib.suppress(OSError):
                conn.send(_REFUSED)  # a full buffer just gets the close
        conn.close()

    async def _connection(self, conn: socket.socket, key: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = self._limits.request_timeout_seconds
        reader = asyncio.StreamReader(limit=MAX_HEAD_BYTES + MAX_BODY_BYTES)
        protocol = asyncio.StreamReaderProtocol(reader)
        writer: asyncio.StreamWriter | None = None
        due = loop.time() + deadline  # the handshake and the first request, together
        try:
            async with asyncio.timeout_at(due):
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, conn, ssl=self._tls, ssl_handshake_timeout=deadline if self._tls else None
                )
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            h = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
            while True:
                try:
                    async with asyncio.timeout_at(due):
                        request, body = await self._read_request(h, reader)
                except TimeoutError:
                    if h.their_state is h11.SEND_BODY or (h.their_state is h11.IDLE and h.trailing_data[0]):
                        await self._send_error(h, writer, 408, "the request did not arrive in time")
                    return
                except h11.RemoteProtocolError as exc:
                    await self._send_error(h, writer, exc.error_status_hint, str(exc))
                    return
                if request is None:
                    return
                status, headers, chunks = await loop.run_in_executor(self._pool, self._call, request, body, writer)
                await self._send(h, writer, request, status, headers, chunks)
                if h.our_state is not h11.DONE or h.their_state is not h11.DONE:
                    return
                h.start_next_cycle()
                due = loop.time() + deadline  # the next request (or the idle keep-alive) from now
        except (_Closed, OSError, ssl.SSLError, TimeoutError, h11.LocalProtocolError):
            return
        finally:
            if writer is not None:
                writer.close()
            else:
                conn.close()

    async def _read_request(self, h: h11.Connection, reader: asyncio.StreamReader) -> tuple[h11.Request | None, bytes]:
        """The next complete request and its body; (None, b"") when the client closed between requests."""
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = h.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(MAX_HEAD_BYTES)
                if request is None:
                    _check_head(h.trailing_data[0] + data)
                h.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY_BYTES:
                    raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return request, bytes(body)
            elif isinstance(event, h11.ConnectionClosed):
                if request is None:
                    return None, b""
                raise _Closed()
            else:  # PAUSED (a protocol switch was asked for): not served here
                raise h11.RemoteProtocolError("unsupported request", error_status_hint=400)

    def _call(
        self, request: h11.Request, body: bytes, writer: asyncio.StreamWriter
    ) -> tuple[str, list[tuple[bytes, bytes]], list[bytes]]:
        """In a worker thread: run the WSGI app on one request, collect its whole answer."""
        target = request.target.decode("latin-1")
        path, _, query = target.partition("?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method.decode("latin-1"),
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote(path, "latin-1"),
            "QUERY_STRING": query,
            "SERVER_NAME": "clusterd",
            "SERVER_PORT": str(self.port),
            "SERVER_PROTOCOL": f"HTTP/{request.http_version.decode('latin-1')}",
            "REMOTE_ADDR": str((writer.get_extra_info("peername") or ("",))[0]),
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https" if self._tls else "http",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for name, value in request.headers:
            key = name.decode("latin-1").upper().replace("-", "_")
            if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                environ[key] = value.decode("latin-1")
            else:
                key = f"HTTP_{key}"
                text = value.decode("latin-1")
                environ[key] = f"{environ[key]},{text}" if key in environ else text
        answer: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            answer["status"], answer["headers"] = status, headers
            return lambda data: None  # the legacy write() callable; our apps return their body

        try:
            result = self._app(environ, start_response)
            try:
                chunks = [bytes(chunk) for chunk in result]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except Exception:
            log.exception("HTTP request %s failed", path)
            return "500 Internal Server Error", [(b"content-type", b"text/plain")], [b"internal error\n"]
        status = str(answer.get("status", "500 Internal Server Error"))
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.get("headers", [])]
        return status, headers, chunks

    async def _send(
        self,
        h: h11.Connection,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        status: str,
        headers: list[tuple[bytes, bytes]],
        chunks: list[bytes],
    ) -> None:
        body = b"".join(chunks)
        if not any(k.lower() == b"content-length" for k, _ in headers):
            headers.append((b"content-length", str(len(body)).encode()))
        code, _, reason = status.partition(" ")
        data = h.send(h11.Response(status_code=int(code), headers=headers, reason=reason.encode("latin-1"))) or b""
        if request.method != b"HEAD" and body:
            data += h.send(h11.Data(data=body)) or b""
        data += h.send(h11.EndOfMessage()) or b""
        writer.write(data)
        async with asyncio.timeout(_SEND_TIMEOUT):
            await writer.drain()

    async def _send_error(self, h: h11.Connection, writer: asyncio.StreamWriter, status: int, why: str) -> None:
        if h.our_state is not h11.SEND_RESPONSE and h.our_state is not h11.IDLE:
            return
        body = f"{why}\n".encode()
        with contextlib.suppress(h11.LocalProtocolError, OSError, TimeoutError):
            writer.write(
                (
                    h.send(
                        h11.Response(
                            status_code=status,
                            headers=[
                                (b"content-type", b"text/plain"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close"),
                            ],
                        )
                    )
                    or b""
                )
                + (h.send(h11.Data(data=body)) or b"")
                + (h.send(h11.EndOfMessage()) or b"")
            )
            async with asyncio.timeout(1.0):
                await writer.drain()


def _check_head(pending: bytes) -> None:
    """h11 bounds an incomplete head only: one that arrives whole in a read is bounded here."""
    ends = [i for i in (pending.find(b"\r\n\r\n"), pending.find(b"\n\n")) if i >= 0]
    if (min(ends) if ends else len(pending)) > MAX_HEAD_BYTES:
        raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
