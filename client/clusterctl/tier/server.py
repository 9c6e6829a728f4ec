"""The tier process: holds a job's shards in memory, replicates them to peers, uploads them to the URI.

One tier runs per node of a job (as the job's user) and serves that job only: every connection
must prove the job's secret (:mod:`.wire`). A rank's ``put`` is answered once the object is in this
tier's memory and in ``replicas`` peers' (each peer verifies the xxh3 digest that travels with it),
so a committed step has ``replicas + 1`` verified copies in memory. Uploads to the URI run here, in
one background thread, each step's objects in arrival order (a shard before its manifest); a commit
marker goes up only once every manifest it names is on the URI, so the URI never shows a step it
cannot restore. Any local user can connect: logins are few at a time and short (:class:`TierServer`). A
replica is uploaded by its holder when the object is still missing on the URI after
``handoff_delay`` (its primary's node died). Nothing is written to disk: a tier that loses its
process or its node's memory is empty.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..checkpoint import checksum, layout
from ..checkpoint.manifest import MAX_MARKER_BYTES, load_marker
from ..storage import ObjectExistsError, ObjectNotFoundError, Storage, StorageError, open_storage, validate_key
from .client import TierClient
from .errors import TierCorruptError, TierError, TierFullError
from .store import StoredObject, TierStore, chunk_digests, key_step
from .wire import LOGIN_TIMEOUT, Channel, server_handshake

log = logging.getLogger(__name__)

MAX_OBJECT = 64 << 30


@dataclass(frozen=True)
class TierSettings:
    """How one tier runs: its job, secret, peers (in placement order), replica count and memory cap."""

    job: str
    secret: bytes
    peers: tuple[str, ...] = ()
    replicas: int = 1
    cap_bytes: int = 8 << 30
    handoff_delay: float = 30.0
    upload: bool = True
    retry_max: float = 10.0  # longest pause between tries of an upload while the URI is down
    give_up: float = 3600.0  # an upload failing for this long is dropped (its step stays in memory only)
    max_logins: int = 32  # connections still proving the secret; more are closed at once
    login_timeout: float = LOGIN_TIMEOUT  # the longest a caller may take to prove the secret


@dataclass
class _Item:
    due: float
    kind: str  # "upload" (a rank's object), "handoff" (a replica, if its primary's never arrives), "delete"
    ns: str
    key: str | list[str]
    first: float  # when it was queued: an item failing for longer than ``give_up`` is dropped
    tries: int = 0

    def order(self) -> tuple[str, int | None, str] | None:
        """Items with the same order key go up in arrival order (a shard before its manifest)."""
        if self.kind == "delete" or not isinstance(self.key, str) or layout.parse_commit_key(self.key) is not None:
            return None  # a commit marker checks its manifests itself
        return (self.ns, key_step(self.key), self.kind)


class Uploader:
    """Writes objects to their namespace's URI in the background, retrying each with backoff.

    Objects of one step and kind go up in arrival order; an item that fails (URI down, a manifest
    not there yet) is tried again later and does not hold up other steps. One that keeps failing
    for ``give_up`` seconds is dropped with an error (its step stays in memory only, and none of
    that step's later objects go up, so the URI never shows a step it cannot restore).
    """

    def __init__(
        self,
        store: TierStore,
        opener: Callable[[str], Storage],
        retry_max: float = 10.0,
        give_up: float = 3600.0,
    ) -> None:
        self._retry_max = retry_max
        self._give_up = give_up
        self._store = store
        self._opener = opener
        self._storages: dict[str, Storage] = {}
        self._queue: list[_Item] = []
        self._failed: set[tuple[str, int | None, str]] = set()
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="tier-upload", daemon=True)
        self._thread.start()

    def enqueue(self, kind: str, ns: str, key: str | list[str], *, delay: float = 0.0) -> None:
        now = time.monotonic()
        with self._cond:
            self._queue.append(_Item(now + delay, kind, ns, key, now))
            self._cond.notify()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the upload in progress (waiting at most ``timeout``), then close the storages."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout)
        for storage in self._storages.values():
            with contextlib.suppress(Exception):
                storage.close()
        self._storages.clear()

    def _storage(self, ns: str) -> Storage:
        if ns not in self._storages:
            self._storages[ns] = self._opener(ns)
        return self._storages[ns]

    def _next(self) -> _Item | None:
        """The first due item not behind an earlier one of its order; None when the thread must stop."""
        with self._cond:
            while not self._stop:
                now, ahead, wake = time.monotonic(), set(), None
                for item in self._queue:
                    order = item.order()
                    blocked = order in ahead
                    if order is not None:
                        ahead.add(order)
                    if blocked:
                        continue  # it waits for the earlier item, not for its own due time
                    if item.due <= now:
                        return item
                    wake = item.due if wake is None else min(wake, item.due)
                self._cond.wait(None if wake is None else max(0.0, min(0.5, wake - now)))
            return None

    def _loop(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            try:
                self._attempt(item)
            except Exception:  # a bug here must not end the uploads silently
                log.exception("memory tier: uploader error on %s of %s", item.key, item.ns)
                time.sleep(0.1)

    def _attempt(self, item: _Item) -> None:
        order = item.order()
        try:
            if order is not None and order in self._failed:
                pass  # an earlier object of this step was given up: the step must not appear on the URI
            else:
                self._do(item.kind, item.ns, item.key)
        except Exception as exc:  # storage down or slow, or a marker's manifest not up yet
            item.tries += 1
            if time.monotonic() - item.first >= self._give_up:
                log.error(
                    "memory tier: gave up uploading %s to %s after %d tries over %.0f s (%s); its step stays "
                    "in memory only",
                    item.key,
                    item.ns,
                    item.tries,
                    time.monotonic() - item.first,
                    exc,
                )
                if order is not None:
                    self._failed.add(order)
            else:
                log.log(
                    logging.WARNING if item.tries == 1 else logging.DEBUG,  # one warning per item, not per try
                    "memory tier: upload of %s to %s failed, retrying: %s",
                    item.key,
                    item.ns,
                    exc,
                )
                with self._cond:  # later; a marker to the back, so what it waits for (a replica's manifest) goes first
                    item.due = time.monotonic() + min(0.2 * 2 ** (item.tries - 1), self._retry_max)
                    if order is None:
                        self._queue.remove(item)
                        self._queue.append(item)
                return
        with self._cond:
            self._queue.remove(item)

    def _do(self, kind: str, ns: str, key: str | list[str]) -> None:
        storage = self._storage(ns)
        if kind == "delete":
            assert isinstance(key, list)
            storage.delete(key)
            return
        assert isinstance(key, str)
        obj = self._store.get(ns, key)
        if obj is None or obj.durable:
            return  # dropped or deleted before it went up, or already there
        if kind == "handoff":
            with contextlib.suppress(ObjectNotFoundError):
                storage.stat(key)
                self._store.mark_durable(ns, key)
                return
        step = layout.parse_commit_key(key)
        if step is not None:
            marker = load_marker(bytes(obj.data[:MAX_MARKER_BYTES]))
            for shard in marker.shards:
                storage.stat(shard.manifest_key)  # ObjectNotFoundError: retried until its tier uploads it
        data = obj.verified_range(0, len(obj.data))
        with contextlib.suppress(ObjectExistsError):
            storage.put(key, data, if_absent=step is not None)
        self._store.mark_durable(ns, key)


class TierServer:
    """Accepts authenticated connections and serves the store; ``serve_forever`` in its own thread."""

    def __init__(
        self,
        settings: TierSettings,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        opener: Callable[[str], Storage] = open_storage,
    ) -> None:
        self.settings = settings
        self.store = TierStore(settings.cap_bytes)
        self._peers = list(settings.peers)
        self._replicas = settings.replicas
        self._clients: dict[str, TierClient] = {}
        self._sock = socket.create_server((host, port), backlog=128)
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self.uploader = Uploader(self.store, opener, settings.retry_max, settings.give_up) if settings.upload else None
        self._closed = False
        self._logins = 0  # connections not yet authenticated (each holds a thread for LOGIN_TIMEOUT at most)
        self._logins_lock = threading.Lock()
        self._refusals = _Throttled(log, 10.0)

    # --- connections ----------------------------------------------------------------------
    def serve_forever(self) -> None:
        """Accept until closed. Any local user can connect, so a login holds a thread for
        LOGIN_TIMEOUT at most, at most ``max_logins`` run at once (the job's user's process limit
        is the job's), and a connection beyond that or without a thread is closed at once."""
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)  # out of descriptors: the accept loop must outlive it
                continue
            with self._logins_lock:
                admit = self._logins < self.settings.max_logins
                self._logins += admit
            if not admit:
                conn.close()
                self._refusals.warning("memory tier: closed connections beyond %d logins in progress", self._logins)
                continue
            try:
                threading.Thread(target=self._serve, args=(conn,), name="tier-conn", daemon=True).start()
            except Exception as exc:  # no thread left for this user: drop the caller, keep accepting
                self._logged_in()
                conn.close()
                self._refusals.warning("memory tier: closed a connection, no thread to serve it: %s", exc)

    def _logged_in(self) -> None:
        with self._logins_lock:
            self._logins -= 1

    def start(self) -> TierServer:
        threading.Thread(target=self.serve_forever, name="tier-accept", daemon=True).start()
        return self

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        if self.uploader is not None:
            self.uploader.stop()
        for client in list(self._clients.values()):
            client.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            chan = server_handshake(
                conn, self.settings.secret, self.settings.job, self.address, self.settings.login_timeout
            )
        except (TierError, OSError) as exc:  # wrong secret, junk, silence or a hang-up
            self._refusals.warning("memory tier: refused a connection: %s", exc)
            conn.close()
            return
        finally:
            self._logged_in()
        try:
            while True:
                header = chan.recv_header()
                try:
                    self._dispatch(chan, header)
                except _Refused as exc:
                    chan.send({"error": exc.code, "message": str(exc)})
                    if header.get("op") == "put":  # its payload may be unread: the link is out of step
                        _hang_up(chan.sock)
                        break
        except (TierError, OSError, ValueError) as exc:
            if not isinstance(exc, TierError) or "closed" not in str(exc):
                log.debug("memory tier: connection ended: %s", exc)
        except Exception:  # a rank's request must never end the tier; log it and drop the link
            log.exception("memory tier: request failed")
        finally:
            chan.close()

    # --- requests -------------------------------------------------------------------------
    def _dispatch(self, chan: Channel, h: dict[str, Any]) -> None:
        op = h.get("op")
        if op == "configure":
            peers, replicas = h.get("peers"), h.get("replicas", self._replicas)
            if (
                not isinstance(peers, list)
                or not all(isinstance(p, str) for p in peers)
                or not isinstance(replicas, int)
            ):
                raise _Refused("bad_request", "configure needs peers: [host:port] and replicas: int")
            self._peers, self._replicas = list(peers), replicas
            chan.send({"ok": True})
            return
        ns = _field(h, "ns")
        if op == "put":
            self._put(chan, ns, h)
        elif op == "get":
            self._get(chan, ns, h)
        elif op == "stat":
            obj = self.store.get(ns, _key(h))
            if obj is None:
                raise _Refused("not_found", f"{h['key']} not in this memory tier")
            chan.send({"ok": True, "bytes": len(obj.data), "mtime": obj.mtime})
        elif op == "list":
            prefix = _valid(_field(h, "prefix"), allow_empty=True, what="prefix")
            chan.send({"ok": True, "objects": self.store.listing(ns, prefix)})
        elif op == "delete":
            keys = h.get("keys", [])
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise _Refused("bad_request", "keys must be a list of strings")
            keys = [_valid(k) for k in keys]
            self.store.delete(ns, keys)
            if h.get("propagate"):
                for peer in self._peers:
                    with contextlib.suppress(TierError, OSError):
                        self._client(peer).delete(ns, keys, propagate=False)
                if self.uploader is not None and keys:
                    self.uploader.enqueue("delete", ns, keys)
            chan.send({"ok": True})
        elif op == "status":
            chan.send({"ok": True, **self.status(ns)})
        else:
            raise _Refused("bad_request", f"unknown op {op!r}")

    def _put(self, chan: Channel, ns: str, h: dict[str, Any]) -> None:
        key = _key(h)
        size, digest = h.get("size"), h.get("digest")
        if not isinstance(size, int) or not 0 <= size <= MAX_OBJECT or not isinstance(digest, (str, type(None))):
            raise TierError("put needs size and digest")  # the payload's length is unknown: drop the link
        if size > self.store.cap:  # refused before a byte is allocated; the unread payload ends the link
            raise _Refused("full", f"{key} is {size} bytes, more than the tier's cap of {self.store.cap}")
        data = bytearray(size)
        view = memoryview(data)
        chan.recv_payload_into(view, None)
        if digest is not None and checksum.digest(view) != digest:
            raise _Refused("corrupt", f"{key}: the payload failed its xxh3 digest")
        primary = bool(h.get("replicate", True))
        obj = StoredObject(data, chunk_digests(view), primary=primary)
        try:
            self.store.put(ns, key, obj, if_absent=bool(h.get("if_absent")))
        except FileExistsError:
            raise _Refused("exists", f"{key} already exists") from None
        except TierFullError as exc:
            raise _Refused("full", str(exc)) from None
        copies = 1
        if primary and key_step(key) is not None:
            took = self._replicate(ns, key, view)
            copies += len(took)
            if copies < self._replicas + 1:
                self.store.delete(ns, [key])
                for peer in took:  # no copies of a refused put linger in peers' memory
                    with contextlib.suppress(TierError, StorageError, OSError):
                        self._client(peer).delete(ns, [key], propagate=False)
                raise _Refused(
                    "unavailable",
                    f"{key}: only {copies - 1} of {self._replicas} peer tiers took a copy (peers: {self._peers})",
                )
        if self.uploader is not None and key_step(key) is not None:
            if primary:
                self.uploader.enqueue("upload", ns, key)
            else:
                self.uploader.enqueue("handoff", ns, key, delay=self.settings.handoff_delay)
        chan.send({"ok": True, "copies": copies})

    def _replicate(self, ns: str, key: str, view: memoryview) -> list[str]:
        """Copy to the first ``replicas`` peers that take it, in placement order; returns those that did."""
        done: list[str] = []
        for peer in self._peers:
            if len(done) >= self._replicas:
                break
            try:
                self._client(peer).put(ns, key, view, replicate=False)
                done.append(peer)
            except ObjectExistsError:
                done.append(peer)
            except (TierError, StorageError, OSError) as exc:
                log.warning("memory tier: replica of %s to %s failed: %s", key, peer, exc)
        return done

    def _get(self, chan: Channel, ns: str, h: dict[str, Any]) -> None:
        key = _key(h)
        obj = self.store.get(ns, key)
        if obj is None:
            raise _Refused("not_found", f"{key} not in this memory tier")
        offset = h.get("offset", 0)
        length = h.get("length")
        total = len(obj.data)
        if length is None and isinstance(offset, int):
            length = total - offset
        if not isinstance(offset, int) or not isinstance(length, int) or offset < 0 or length < 0:
            raise _Refused("bad_request", "offset and length must be non-negative integers")
        if offset + length > total:
            raise _Refused("bad_request", f"{key} is {total} bytes, cannot read [{offset}, {offset + length})")
        try:
            chunks = obj.range_digests(offset, length)
        except TierCorruptError as exc:
            log.error("memory tier: %s/%s: %s", ns, key, exc)
            raise _Refused("corrupt", f"{key}: {exc}") from None
        view = memoryview(obj.data)[offset : offset + length]
        chan.send({"ok": True, "size": length, "total": total, "chunks": chunks}, view)

    def _client(self, peer: str) -> TierClient:
        if peer not in self._clients:
            self._clients[peer] = TierClient(peer, secret=self.settings.secret, job=self.settings.job)
        return self._clients[peer]

    def status(self, ns: str) -> dict[str, Any]:
        """Per step: bytes here, whether every object here is durable, whether it is committed."""
        steps: dict[int, dict[str, Any]] = {}
        for key, size, _ in self.store.listing(ns, ""):
            step = key_step(key)
            if step is None:
                continue
            obj = self.store.get(ns, key)
            entry = steps.setdefault(step, {"bytes": 0, "durable": True, "committed": False})
            entry["bytes"] += size
            entry["durable"] = entry["durable"] and obj is not None and obj.durable
            entry["committed"] = entry["committed"] or layout.parse_commit_key(key) is not None
        return {"steps": {str(s): v for s, v in sorted(steps.items())}, "used": self.store.used, "cap": self.store.cap}


def _hang_up(sock: socket.socket, linger: float = 2.0) -> None:
    """End a link after a refusal so that its answer arrives: closing with a payload still unread
    would reset the connection and lose the answer, so read and drop what the client still sends
    (for ``linger`` seconds at most) after saying we are done."""
    deadline = time.monotonic() + linger
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(1 << 20):
                break


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _field(h: dict[str, Any], name: str) -> str:
    value = h.get(name)
    if not isinstance(value, str):
        raise _Refused("bad_request", f"{name} must be a string")
    return value


def _valid(key: str, *, allow_empty: bool = False, what: str = "key") -> str:
    try:
        return validate_key(key, allow_empty=allow_empty, what=what)
    except StorageError as exc:
        raise _Refused("bad_request", str(exc)) from None


def _key(h: dict[str, Any]) -> str:
    return _valid(_field(h, "key"))


class _Throttled:
    """A warning logged at most once per ``every`` seconds, with how many were held back: any
    local user can connect, and must not flood the job's log."""

    def __init__(self, logger: logging.Logger, every: float) -> None:
        self._log = logger
        self._every = every
        self._next = 0.0
        self._held = 0
        self._lock = threading.Lock()

    def warning(self, msg: str, *args: object) -> None:
        with self._lock:
            now = time.monotonic()
            if now < self._next:
                self._held += 1
                return
            held, self._held, self._next = self._held, 0, now + self._every
        self._log.warning(msg + (" (and %d more like it held back)" if held else ""), *args, *((held,) if held else ()))
