"""The unix socket clusterd listens on, and the directory that makes it safe.

Who may connect is decided by the file system: the socket's directory is ``0750 owner:group`` and
the socket ``0660 owner:group``, so a local user outside ``socket_group`` cannot even reach it.
Nobody but clusterd's own user can create a file in that directory, so while clusterd is down no
other process can bind the path and collect the bearer tokens of the clients that reconnect (the
attack a loopback TCP port is open to). The directory is refused when someone else owns it, or when
its parent lets others rename it away (writable by group/others without the sticky bit), and a
shared directory such as ``/tmp`` is refused rather than re-moded (that would lock every other user out).
"""

from __future__ import annotations

import contextlib
import grp
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from clusterd.config import ConfigError

from .files import refuse_shared_dir

DIR_MODE = 0o750
SOCKET_MODE = 0o660
_MAX_PATH = 107  # sun_path holds 108 bytes, the last one a NUL


def socket_path(listen: str) -> str | None:
    """``unix:/p`` or ``unix:///p`` -> ``/p``; None for a TCP address. Raises ConfigError when unusable."""
    if listen.startswith("unix-abstract:"):
        raise ConfigError(
            f"listen {listen!r}: abstract unix sockets have no file permissions (anyone on the "
            "host could connect); use unix:/ABSOLUTE/PATH"
        )
    if not listen.startswith("unix:"):
        return None
    path = listen.removeprefix("unix:")
    if path.startswith("//"):
        path = path[2:]
    if not path.startswith("/"):
        raise ConfigError(f"listen {listen!r}: the socket path must be absolute (unix:/run/clusterd/clusterd.sock)")
    if len(os.fsencode(path)) > _MAX_PATH:
        raise ConfigError(f"listen {listen!r}: a unix socket path has at most {_MAX_PATH} bytes")
    return path


@dataclass(frozen=True)
class SocketPlan:
    """Where the socket goes and who gets it: made by :func:`prepare_socket_dir`, applied by :func:`secure_socket`."""

    path: Path
    gid: int | None  # None: socket_group is empty, only clusterd's own user connects


def _group_id(name: str) -> int | None:
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ConfigError(
            f"socket_group {name!r} does not exist: create it (groupadd {name}) and add the users "
            "allowed to call clusterd, or set socket_group"
        ) from None


def _check_parent(directory: Path) -> None:
    parent = directory.parent
    st = parent.stat()
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX and st.st_uid not in (0, os.geteuid()):
        raise ConfigError(
            f"socket directory {directory}: its parent {parent} is writable by others "
            "(another user could move the directory away and put their own there)"
        )


def prepare_socket_dir(path: str, group: str) -> SocketPlan:
    """Create (or take over) the socket's directory as ``0750 clusterd:group`` and clear the way.

    Raises:
        ConfigError: the group does not exist, the directory belongs to someone else or is a
            symlink, its parent is unsafe, or something other than a socket sits at ``path``.
    """
    gid = _group_id(group)
    sock = Path(path)
    directory = sock.parent
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        _check_parent(directory)
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
        st = directory.lstat()
        if not stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"socket directory {directory} is not a directory (a symlink?)")
        if st.st_uid != os.geteuid():
            raise ConfigError(
                f"socket directory {directory} belongs to uid {st.st_uid}, not clusterd's "
                f"(uid {os.geteuid()}): whoever owns it could replace the socket; remove it"
            )
        refuse_shared_dir(directory, st, "socket directory")
        os.chown(directory, -1, gid if gid is not None else -1)
        os.chmod(directory, DIR_MODE if gid is not None else 0o700)
        try:
            existing = sock.lstat()
        except FileNotFoundError:
            existing = None
        if existing is not None and not stat.S_ISSOCK(existing.st_mode):
            raise ConfigError(f"{sock} exists and is not a socket: remove it or choose another listen path")
        if existing is not None and _listening(sock):
            raise ConfigError(f"{sock}: another process is listening there (a second clusterd?)")
    except OSError as exc:
        raise ConfigError(f"cannot prepare the socket directory {directory}: {exc.strerror or exc}") from exc
    return SocketPlan(sock, gid)


def _listening(path: Path) -> bool:
    """Whether something accepts on ``path`` (gRPC would silently unlink and take over a live socket)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False  # a stale socket from a crash: gRPC unlinks it before binding
    return True


def secure_socket(plan: SocketPlan) -> None:
    """Give the freshly bound socket its group and mode (the directory already keeps others out)."""
    if plan.gid is not None:
        os.chown(plan.path, -1, plan.gid)
    os.chmod(plan.path, SOCKET_MODE if plan.gid is not None else 0o600)
