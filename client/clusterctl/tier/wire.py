"""The tier's wire protocol: a mutual HMAC handshake on the job's secret, then MAC'd frames.

Handshake: the server sends a nonce; the client answers with its own nonce, the job id, the
address it dialled (``node:port``) and ``HMAC(secret, "c" | nonces | job | address)``; the server
checks it against the name and port it was started with and proves itself the same way (``"s"``).
A process that squats a tier's port learns nothing and is refused by the client, and one that relays
the bytes to a tier elsewhere (another port, another node) is refused by that tier: the proofs name
the address the client meant. Both derive a session key from the secret, both nonces and the address.

Frame: ``u32 header length | header JSON | 32-byte MAC | payload``. The MAC (HMAC-SHA256 of the
session key) covers a per-direction sequence number and the header, and the header carries the
payload's size and xxh3 digest (a read's reply: one per piece, cut at the tier's 1 MiB chunks, the
digests taken when the object was stored), so a frame cannot be replayed, reordered or altered
without the secret, and a payload damaged in transit, or in the tier's memory, fails its digest.
The payload is not encrypted: reading it takes a position on the wire (root or the fabric), not a
normal user's shell.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import socket
import struct
import time
from typing import Any

from .errors import TierAuthError, TierBusyError, TierCorruptError, TierError

MAX_HEADER = 1 << 20
MAC_LEN = 32
_LEN = struct.Struct(">I")
_SEQ = struct.Struct(">Q")
HANDSHAKE_TIMEOUT = 10.0  # a rank waiting for its tier's answer
LOGIN_TIMEOUT = 2.0  # a caller's whole login at the tier: a silent caller gives its slot back soon


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"|".join(parts), hashlib.sha256).digest()


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytearray:
    buf = bytearray(n)
    recv_into_exact(sock, memoryview(buf), deadline)
    return buf


def recv_into_exact(sock: socket.socket, view: memoryview, deadline: float | None = None) -> None:
    """Fill ``view``; with a ``deadline`` (monotonic) the whole read must end by then, however it trickles."""
    got = 0
    while got < len(view):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out")
            sock.settimeout(left)
        n = sock.recv_into(view[got:], min(len(view) - got, 64 << 20))
        if n == 0:
            raise TierError("the tier connection closed mid-frame")
        got += n


class Channel:
    """One authenticated connection: sends and receives MAC'd frames in order."""

    def __init__(self, sock: socket.socket, key: bytes, *, is_server: bool) -> None:
        self.sock = sock
        self._key = key
        self._send_dir = b"s" if is_server else b"c"
        self._recv_dir = b"c" if is_server else b"s"
        self._send_seq = 0
        self._recv_seq = 0

    def send(self, header: dict[str, Any], payload: memoryview | bytes | None = None) -> None:
        raw = json.dumps(header, separators=(",", ":")).encode()
        mac = _mac(self._key, self._send_dir, _SEQ.pack(self._send_seq), raw)
        self._send_seq += 1
        self.sock.sendall(_LEN.pack(len(raw)) + raw + mac)
        if payload is not None and len(payload):
            self.sock.sendall(payload)

    def recv_header(self) -> dict[str, Any]:
        (n,) = _LEN.unpack(recv_exact(self.sock, 4))
        if n > MAX_HEADER:
            raise TierError(f"tier frame header of {n} bytes refused")
        raw = bytes(recv_exact(self.sock, n))
        mac = bytes(recv_exact(self.sock, MAC_LEN))
        if not hmac.compare_digest(mac, _mac(self._key, self._recv_dir, _SEQ.pack(self._recv_seq), raw)):
            raise TierAuthError("tier frame failed its MAC (tampered, replayed or another job's key)")
        self._recv_seq += 1
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise TierError("tier frame header is not an object")
        return header

    def recv_payload_into(self, view: memoryview, digest: str | None, chunks: Any = None) -> None:
        """Read the frame's payload into ``view`` and check it against the header's digest, or piece
        by piece (each hashed while it is still in cache) against ``chunks``: [[size, xxh3], ...]."""
        from ..checkpoint import checksum

        if chunks is None:
            recv_into_exact(self.sock, view)
            if digest is not None and checksum.digest(view) != digest:
                raise TierCorruptError("tier payload failed its xxh3 digest on the wire")
            return
        if not isinstance(chunks, list) or sum(int(n) for n, _ in chunks) != len(view):
            raise TierError("tier payload pieces do not add up to its size")
        pos = 0
        for n, want in chunks:
            part = view[pos : pos + int(n)]
            recv_into_exact(self.sock, part)
            if checksum.digest(part) != want:
                raise TierCorruptError(
                    f"tier payload failed its xxh3 digest at byte {pos} (in the tier or on the wire)"
                )
            pos += int(n)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def canonical(address: str) -> str:
    """``host:port`` as both sides of a login write it into its proofs (host in lower case, no brackets)."""
    host, _, port = address.rpartition(":")
    return f"{host.strip('[]').lower()}:{port}"


def client_handshake(
    sock: socket.socket, secret: bytes, job: str, address: str, timeout: float = HANDSHAKE_TIMEOUT
) -> Channel:
    """Authenticate to the tier that listens at ``address`` (the one dialled) as a rank of ``job``
    within ``timeout`` seconds; raises TierAuthError when either side is wrong, or the bytes reach a
    tier at another address (a relay)."""
    deadline = time.monotonic() + timeout  # a squatter that trickles bytes cannot hold a rank
    sock.settimeout(timeout)
    try:
        got = sock.recv(1, socket.MSG_PEEK)
    except OSError:
        got = b"-"  # reset or silent: _read_plain says which
    if not got:  # closed before its greeting: the tier's logins are all taken (or it is shutting down)
        raise TierBusyError("the tier closed the connection before its login (busy)")
    hello = _read_plain(sock, deadline)
    snonce = _hex(hello, "nonce")
    cnonce = os.urandom(16)
    to = canonical(address)
    proof = _mac(secret, b"c", snonce, cnonce, job.encode(), to.encode())
    _write_plain(sock, {"job": job, "to": to, "nonce": cnonce.hex(), "proof": proof.hex()})
    reply = _read_plain(sock, deadline)
    if "error" in reply:
        raise TierAuthError(f"the tier refused this process: {str(reply['error'])[:200]}")
    want = _mac(secret, b"s", snonce, cnonce, job.encode(), to.encode())
    if not hmac.compare_digest(_hex(reply, "proof"), want):
        raise TierAuthError(f"the process at {address} is not a tier of this job")
    sock.settimeout(None)
    return Channel(sock, _mac(secret, b"k", snonce, cnonce, to.encode()), is_server=False)


def server_handshake(
    sock: socket.socket, secret: bytes, job: str, address: str, timeout: float = LOGIN_TIMEOUT
) -> Channel:
    """Admit a rank of ``job`` (the one job this tier serves) that dialled this tier's own ``address``
    (the name and port it listens on); raises TierAuthError otherwise."""
    deadline = time.monotonic() + timeout
    sock.settimeout(timeout)
    snonce = os.urandom(16)
    _write_plain(sock, {"nonce": snonce.hex()})
    hello = _read_plain(sock, deadline)
    try:
        cnonce = _hex(hello, "nonce")
        proof = _hex(hello, "proof")
        their_job = str(hello["job"])
        their_to = str(hello["to"])
    except (KeyError, TierAuthError):
        _write_plain(sock, {"error": "malformed handshake"})
        raise TierAuthError("malformed handshake") from None
    me = canonical(address)
    if their_to != me:  # relayed from another port or node, or dialled by another name
        _write_plain(sock, {"error": "dialled another address than this tier's"})
        raise TierAuthError(f"refused a caller that dialled {their_to[:128]!r}, not this tier's {me!r}")
    want = _mac(secret, b"c", snonce, cnonce, job.encode(), me.encode())
    if their_job != job or len(cnonce) != 16 or not hmac.compare_digest(proof, want):
        _write_plain(sock, {"error": "not a rank of this tier's job"})
        raise TierAuthError(f"refused a caller claiming job {their_job[:64]!r}")
    _write_plain(sock, {"proof": _mac(secret, b"s", snonce, cnonce, job.encode(), me.encode()).hex()})
    sock.settimeout(None)
    return Channel(sock, _mac(secret, b"k", snonce, cnonce, me.encode()), is_server=True)


def _write_plain(sock: socket.socket, doc: dict[str, Any]) -> None:
    raw = json.dumps(doc).encode()
    sock.sendall(_LEN.pack(len(raw)) + raw)


def _hex(doc: dict[str, Any], name: str) -> bytes:
    """A hex field of a handshake message; anything else is a failed login, never a crash."""
    try:
        return bytes.fromhex(str(doc.get(name, "")))
    except ValueError:
        raise TierAuthError(f"malformed handshake: {name} is not hex") from None


def _read_plain(sock: socket.socket, deadline: float | None = None) -> dict[str, Any]:
    try:
        (n,) = _LEN.unpack(recv_exact(sock, 4, deadline))
        if n > 4096:
            raise TierAuthError("handshake message too large")
        doc = json.loads(bytes(recv_exact(sock, n, deadline)))
    except (OSError, ValueError) as exc:
        raise TierAuthError(f"tier handshake failed: {exc}") from None
    if not isinstance(doc, dict):
        raise TierAuthError("malformed handshake")
    return doc
