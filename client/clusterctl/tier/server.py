"""The tier process: holds a job's shards in memory, replicates them to peers, uploads them to the URI.

One tier runs per node of a job (as the job's user) and serves that job only: every connection
must prove the job's secret (:mod:`.wire`). A rank's ``put`` is answered once the object is in this
tier's memory and in ``replicas`` peers' (each peer verifies the xxh3 digest that travels with it),
so a committed step has ``replicas + 1`` verified copies in memory. Uploads to the URI run here, in
one background thread, in arrival order (a shard before its manifest); a commit marker goes up only
once every manifest it names is on the URI, so the URI never shows a step it cannot restore. A
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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..checkpoint import checksum, layout
from ..checkpoint.manifest import MAX_MARKER_BYTES, load_marker
from ..storage import ObjectExistsError, ObjectNotFoundError, Storage, StorageError, open_storage, validate_key
from .client import TierClient
from .errors import TierAuthError, TierCorruptError, TierError, TierFullError
from .store import StoredObject, TierStore, chunk_digests, key_step
from .wire import Channel, server_handshake

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


class Uploader:
    """Writes objects to their namespace's URI in the background, in order, retrying with backoff."""

    def __init__(
        self, store: TierStore, opener: Callable[[str], Storage], handoff_delay: float, retry_max: float = 10.0
    ) -> None:
        self._retry_max = retry_max
        self._store = store
        self._opener = opener
        self._storages: dict[str, Storage] = {}
        self._queue: deque[tuple[float, str, str, str | list[str]]] = deque()
        self._cond = threading.Condition()
        self._handoff = handoff_delay
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="tier-upload", daemon=True)
        self._thread.start()

    def enqueue(self, kind: str, ns: str, key: str | list[str], *, delay: float = 0.0) -> None:
        with self._cond:
            self._queue.append((time.monotonic() + delay, kind, ns, key))
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()

    def _storage(self, ns: str) -> Storage:
        if ns not in self._storages:
            self._storages[ns] = self._opener(ns)
        return self._storages[ns]

    def _loop(self) -> None:
        backoff = min(0.2, self._retry_max)
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                due, kind, ns, key = self._queue[0]
            if due > time.monotonic():
                time.sleep(min(0.5, due - time.monotonic()))
                with self._cond:  # move a delayed handoff behind the work that is due
                    if self._queue and self._queue[0][0] > time.monotonic() and len(self._queue) > 1:
                        self._queue.rotate(-1)
                continue
            try:
                self._do(kind, ns, key)
                backoff = min(0.2, self._retry_max)
                with self._cond:
                    self._queue.popleft()
            except Exception as exc:  # storage down or slow: keep order, retry later
                first = backoff == min(0.2, self._retry_max)  # one warning per outage, not one per try
                log.log(
                    logging.WARNING if first else logging.DEBUG,
                    "memory tier: upload of %s to %s failed, retrying: %s",
                    key,
                    ns,
                    exc,
                )
                time.sleep(backoff)
                backoff = min(backoff * 2, self._retry_max)

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
        self.uploader = (
            Uploader(self.store, opener, settings.handoff_delay, settings.retry_max) if settings.upload else None
        )
        self._closed = False

    # --- connections ----------------------------------------------------------------------
    def serve_forever(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

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
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            chan = server_handshake(conn, self.settings.secret, self.settings.job)
        except (TierAuthError, OSError) as exc:
            log.warning("memory tier: refused a connection: %s", exc)
            conn.close()
            return
        try:
            while True:
                header = chan.recv_header()
                try:
                    self._dispatch(chan, header)
                except _Refused as exc:
                    chan.send({"error": exc.code, "message": str(exc)})
        except (TierError, OSError, ValueError) as exc:
            if not isinstance(exc, TierError) or "closed" not in str(exc):
                log.debug("memory tier: connection ended: %s", exc)
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
            prefix = validate_key(_field(h, "prefix"), allow_empty=True, what="prefix")
            chan.send({"ok": True, "objects": self.store.listing(ns, prefix)})
        elif op == "delete":
            keys = [validate_key(k) for k in h.get("keys", [])]
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
            chan.send(
                {"error": "full", "message": f"{key} is {size} bytes, more than the tier's cap of {self.store.cap}"}
            )
            raise TierError("an object over the cap was refused")
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
            copies += self._replicate(ns, key, view)
            if copies < self._replicas + 1:
                self.store.delete(ns, [key])
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

    def _replicate(self, ns: str, key: str, view: memoryview) -> int:
        """Copy to the first ``replicas`` peers that take it, in placement order; returns how many did."""
        done = 0
        for peer in self._peers:
            if done >= self._replicas:
                break
            try:
                self._client(peer).put(ns, key, view, replicate=False)
                done += 1
            except ObjectExistsError:
                done += 1
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
        if length is None:
            length = total - offset
        if not isinstance(offset, int) or not isinstance(length, int) or offset < 0 or length < 0:
            raise _Refused("bad_request", "offset and length must be non-negative integers")
        if offset + length > total:
            raise _Refused("bad_request", f"{key} is {total} bytes, cannot read [{offset}, {offset + length})")
        try:
            view = obj.verified_range(offset, length)
        except TierCorruptError as exc:
            log.error("memory tier: %s/%s: %s", ns, key, exc)
            raise _Refused("corrupt", f"{key}: {exc}") from None
        chan.send({"ok": True, "size": length, "total": total, "digest": checksum.digest(view)}, view)

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


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _field(h: dict[str, Any], name: str) -> str:
    value = h.get(name)
    if not isinstance(value, str):
        raise _Refused("bad_request", f"{name} must be a string")
    return value


def _key(h: dict[str, Any]) -> str:
    try:
        return validate_key(_field(h, "key"))
    except StorageError as exc:
        raise _Refused("bad_request", str(exc)) from None
