"""A client of one tier process (the node's own over loopback, or a peer's over the network).

Connections are authenticated with the job's secret (:mod:`.wire`) and pooled, so concurrent
range reads of one shard run in parallel. A failed connection, and one whose put was refused, is
dropped, never reused.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..checkpoint import checksum
from ..storage import ObjectExistsError, ObjectInfo, ObjectNotFoundError
from .errors import TierAuthError, TierBusyError, TierCorruptError, TierError, TierFullError, TierUnavailableError
from .wire import HANDSHAKE_TIMEOUT, Channel, client_handshake

_ERRORS: dict[str, type[Exception]] = {
    "not_found": ObjectNotFoundError,
    "exists": ObjectExistsError,
    "full": TierFullError,
    "corrupt": TierCorruptError,
    "unavailable": TierUnavailableError,
    "auth": TierAuthError,
}


LOGIN_RETRIES = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)  # longer in all than the tier's login timeout


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"tier address {address!r} is not host:port")
    return host.strip("[]"), int(port)


class TierClient:
    """Requests to the tier at ``address`` as a rank of ``job``."""

    def __init__(self, address: str, *, secret: bytes, job: str, timeout: float = 30.0) -> None:
        self.address = address
        self._where = parse_address(address)
        self._secret = secret
        self._job = job
        self._timeout = timeout
        self._idle: list[Channel] = []
        self._lock = threading.Lock()

    def _open(self) -> Channel:
        """A pooled or new connection; a tier busy with other logins is tried again for a few seconds."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        for pause in LOGIN_RETRIES:
            try:
                return self._connect()
            except TierBusyError:
                time.sleep(pause)
        return self._connect()

    def _connect(self) -> Channel:
        try:
            sock = socket.create_connection(self._where, timeout=self._timeout)
        except OSError as exc:
            raise TierUnavailableError(f"memory tier at {self.address} unreachable: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            chan = client_handshake(sock, self._secret, self._job, self.address, min(self._timeout, HANDSHAKE_TIMEOUT))
        except (OSError, ValueError) as exc:  # e.g. a squatter that resets or answers junk
            sock.close()
            raise TierUnavailableError(f"memory tier at {self.address}: login failed: {exc}") from None
        except BaseException:
            sock.close()
            raise
        sock.settimeout(self._timeout)
        return chan

    def _call(
        self, header: dict[str, Any], payload: memoryview | bytes | None = None, out: memoryview | None = None
    ) -> tuple[dict[str, Any], bytes | None]:
        chan = self._open()
        ok = False
        try:
            try:
                try:
                    chan.send(header, payload)
                except OSError:  # the tier may have refused the put and closed: its answer says why
                    reply = chan.recv_header()
                    if "error" not in reply:
                        raise
                    kind = _ERRORS.get(str(reply["error"]), TierError)
                    raise kind(f"memory tier at {self.address}: {reply.get('message', reply['error'])}") from None
                reply = chan.recv_header()
                data: bytes | None = None
                if "error" not in reply and "size" in reply:
                    size = int(reply["size"])
                    if out is not None:
                        if size != len(out):
                            raise TierError(f"tier sent {size} bytes, {len(out)} asked")
                        chan.recv_payload_into(out, reply.get("digest"), reply.get("chunks"))
                    else:
                        buf = bytearray(size)
                        chan.recv_payload_into(memoryview(buf), reply.get("digest"), reply.get("chunks"))
                        data = bytes(buf)
            except (OSError, ValueError, TypeError, KeyError) as exc:
                raise TierUnavailableError(f"memory tier at {self.address}: {exc}") from None
            # after an error reply to a put the tier drops the link (its payload may be unread)
            ok = payload is None or "error" not in reply
        finally:
            if ok:
                with self._lock:
                    self._idle.append(chan)
            else:
                chan.close()
        if "error" in reply:
            kind = _ERRORS.get(str(reply["error"]), TierError)
            raise kind(f"memory tier at {self.address}: {reply.get('message', reply['error'])}")
        return reply, data

    def put(
        self,
        ns: str,
        key: str,
        data: memoryview | bytes,
        *,
        if_absent: bool = False,
        replicate: bool = True,
        digest: bool = True,
    ) -> int:
        """Store an object; the tier answers once it holds its own and its replicas' verified copies.

        ``digest=False`` leaves the hashing to the tier (a put over loopback from the trainer, whose
        CPU time is the training's); the tier then hashes what it received before replicating it.
        Returns the number of copies in memory (1 + replicas)."""
        view = memoryview(data).cast("B")
        header = {
            "op": "put",
            "ns": ns,
            "key": key,
            "size": len(view),
            "digest": checksum.digest(view) if digest else None,
            "if_absent": if_absent,
            "replicate": replicate,
        }
        reply, _ = self._call(header, view)
        return int(reply.get("copies", 1))

    def get(self, ns: str, key: str, *, offset: int = 0, length: int | None = None) -> bytes:
        _, data = self._call({"op": "get", "ns": ns, "key": key, "offset": offset, "length": length})
        assert data is not None
        return data

    def read_into(self, ns: str, key: str, out: memoryview, *, offset: int = 0) -> None:
        self._call({"op": "get", "ns": ns, "key": key, "offset": offset, "length": len(out)}, out=out)

    def stat(self, ns: str, key: str) -> ObjectInfo:
        reply, _ = self._call({"op": "stat", "ns": ns, "key": key})
        return ObjectInfo(key, int(reply["bytes"]), float(reply["mtime"]))

    def list(self, ns: str, prefix: str) -> list[ObjectInfo]:
        reply, _ = self._call({"op": "list", "ns": ns, "prefix": prefix})
        return [ObjectInfo(str(k), int(s), float(m)) for k, s, m in reply["objects"]]

    def delete(self, ns: str, keys: Sequence[str], *, propagate: bool = True) -> None:
        self._call({"op": "delete", "ns": ns, "keys": list(keys), "propagate": propagate})

    def configure(self, peers: Sequence[str], replicas: int) -> None:
        """Tell the tier its peers in placement order (a restarted job's new allocation)."""
        self._call({"op": "configure", "peers": list(peers), "replicas": replicas})

    def status(self, ns: str) -> dict[str, Any]:
        """``{"steps": {step: {"bytes", "durable", "copies_here"}}, "used", "cap"}`` of this tier."""
        reply, _ = self._call({"op": "status", "ns": ns})
        return reply

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for chan in idle:
            chan.close()
