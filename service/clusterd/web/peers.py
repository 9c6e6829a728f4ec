"""Who is at the other end of an HTTP connection, so that one client cannot hold every connection.

Every local user reaches a loopback listener from 127.0.0.1, so the address says nothing about who
connects: the client socket's owner does. For a unix socket the kernel tells it (SO_PEERCRED); for
loopback TCP the kernel's socket table does, asked for exactly that one socket over NETLINK_SOCK_DIAG
(what ``ss`` uses), which costs one round trip however many sockets exist (/proc/net/tcp would be
read whole, every TIME_WAIT line of a flood included). A remote client is its address. When the
table cannot be asked (no netlink in a sandbox), a loopback client is its address too: the bound
is then shared by every local user, which still bounds clusterd but no longer isolates them.
"""

from __future__ import annotations

import socket
import struct

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
# inet_diag_req_v2: family, protocol, ext, pad, states; then inet_diag_sockid: sport, dport (network
# order), src[16], dst[16], interface, cookie[2] (INET_DIAG_NOCOOKIE: any socket with that 4-tuple).
_REQ_HEAD, _REQ_PORTS, _REQ_TAIL = struct.Struct("=BBBBI"), struct.Struct(">HH16s16s"), struct.Struct("=III")
_UID_OFFSET = _HEADER.size + 4 + 48 + 12  # inet_diag_msg: 4 bytes, the sockid, expires/rqueue/wqueue, uid
# The client closed its socket before it was accepted: nothing to answer. The kernel keeps such a
# socket as a minisock without an owner or inode and reports uid 0: it must not count as root's.
GONE = "gone"


class PeerKeys:
    """Names the client of each accepted connection; keeps one netlink socket (one event loop only)."""

    def __init__(self) -> None:
        self._netlink: socket.socket | None = None
        self._seq = 0

    def close(self) -> None:
        if self._netlink is not None:
            self._netlink.close()
            self._netlink = None

    def key(self, conn: socket.socket) -> str:
        """``uid:N`` for a local client whose owner the kernel names, :data:`GONE` for one that closed
        its socket already, else ``addr:IP``."""
        if conn.family == socket.AF_UNIX:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            return f"uid:{struct.unpack('3i', creds)[1]}"
        peer, local = conn.getpeername(), conn.getsockname()
        address, server = _unmapped(peer[0]), _unmapped(local[0])
        if address.startswith("127.") or address == "::1":  # loopback (string tests: this runs per accept)
            # An IPv4 client of a dual-stack listener has an IPv4 socket: ask in its family.
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            owner = self._tcp_owner(family, (address, peer[1]), (server, local[1]))
            if owner is not None:
                uid, inode = owner
                return f"uid:{uid}" if inode else GONE
        return f"addr:{address}"

    def _tcp_owner(self, family: int, client: tuple[str, int], server: tuple[str, int]) -> tuple[int, int] | None:
        """(uid, inode) of the TCP socket at ``client`` connected to ``server`` (None: not found, no netlink)."""
        body = (
            _REQ_HEAD.pack(family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
            + _REQ_PORTS.pack(client[1], server[1], _packed(family, client[0]), _packed(family, server[0]))
            + _REQ_TAIL.pack(0, 0xFFFFFFFF, 0xFFFFFFFF)
        )
        self._seq = self._seq % 0xFFFFFFFF + 1
        message = _HEADER.pack(_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, self._seq, 0) + body
        try:
            if self._netlink is None:
                self._netlink = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG)
                # The kernel answers within the send: never wait on clusterd's event loop for it.
                self._netlink.setblocking(False)
            self._netlink.send(message)
            reply = self._netlink.recv(8192)
        except OSError:
            self.close()
            return None
        if len(reply) < _HEADER.size:
            return None
        _, kind, _, seq, _ = _HEADER.unpack_from(reply)
        if seq != self._seq:  # a late answer to an earlier question: start afresh
            self.close()
            return None
        if kind == _NLMSG_ERROR or len(reply) < _UID_OFFSET + 8:
            return None
        uid, inode = struct.unpack_from("=II", reply, _UID_OFFSET)
        return int(uid), int(inode)


def _unmapped(host: str) -> str:
    """``::ffff:127.0.0.1`` (an IPv4 client of a dual-stack socket) -> ``127.0.0.1``."""
    return host[7:] if host.startswith("::ffff:") and "." in host else host


def _packed(family: int, host: str) -> bytes:
    return socket.inet_pton(family, host).ljust(16, b"\0")
