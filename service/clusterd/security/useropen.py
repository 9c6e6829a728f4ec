"""Open a file with a user's rights, from a service that runs as root.

clusterd is root, and a job's output path is whatever the job's user wrote into ``--output``: a
symbolic link to /etc/shadow, a FIFO, a file in a directory only root may enter. Reading such a
path as root would hand the user whatever root can read. So the file is opened by a short-lived
helper that runs with the user's uid, gid and groups (``setpriv``, as sbatch runs), which passes
the open descriptor back over a socketpair (SCM_RIGHTS) and exits. Whatever the path resolves to,
the kernel checked it against the user's rights, not root's. The service then insists that what
was opened is a regular file the user owns, so a link to a file the user may merely read (another
user's world-readable file, a root-owned one) is refused too: ``logs`` shows what the job wrote.

The descriptor is then read by the service as often as it likes (``logs -f`` polls it) without a
new process per read. When clusterd is not root it cannot change identity: it opens the file
itself, and accepts files owned by the job's user or by the service account (which sbatch ran as).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import socket
import stat
import sys

from clusterd import accounts
from clusterd.accounts import UnixAccount
from clusterd.errors import FailedPrecondition, NotFound, PermissionDenied

# Runs as the user: stdlib only (-I -S: no site, no user paths, no PYTHON* variables).
_OPENER = r"""
import os, socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
try:
    fd = os.open(sys.argv[2], os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
except OSError as e:
    s.sendall(b"E%d" % e.errno)
else:
    socket.send_fds(s, [b"K"], [fd])
"""
_SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin") or ""
_TIMEOUT = 10.0
_DEVNULL = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # every helper's stdin and stdout, opened at import


class FileMissing(NotFound):
    """The path does not exist (yet): a follower waits for it, a plain read reports it."""


def default_python(configured: str = "") -> str:
    """The opener's interpreter: configured, else the system's python3 (executable by every user),
    else clusterd's own (which may sit under a root-only directory)."""
    if configured:
        return configured
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def _refusal(err: int, path: str, field: str, owner: str) -> Exception:
    if err == errno.ENOENT:
        return FileMissing(f"{field} {path} does not exist")
    if err in (errno.EACCES, errno.EPERM):
        return PermissionDenied(f"{field} {path}: permission denied for {owner}")
    if err == errno.ELOOP:
        return PermissionDenied(f"{field} {path}: too many levels of symbolic links")
    return FailedPrecondition(f"{field} {path}: {os.strerror(err)}")


def check_opened(
    fd: int, path: str, field: str, owner: UnixAccount, *, also_uid: int | None = None, directory: bool = False
) -> os.stat_result:
    """fstat what was opened: a regular file (or directory) the owner holds, or it is closed and refused."""
    st = os.fstat(fd)
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    problem = ""
    if not kind_ok:
        problem = "is not a directory" if directory else "is not a regular file"
    elif st.st_uid not in (owner.uid, also_uid):
        problem = (
            f"belongs to uid {st.st_uid}, not to {owner.name}: only what the job's user owns is shown "
            "(a link to another file is not followed there)"
        )
    if problem:
        os.close(fd)
        raise (PermissionDenied if kind_ok else FailedPrecondition)(f"{field} {path} {problem}")
    return st


async def open_as(owner: UnixAccount, path: str, *, field: str, python: str = "", directory: bool = False) -> int:
    """A read-only descriptor of ``path`` opened with ``owner``'s rights; the caller closes it.

    Raises FileMissing, PermissionDenied (no access, or not the owner's file), FailedPrecondition
    (not a regular file, the helper failed), each naming ``field`` and the path.
    """
    if not os.path.isabs(path):
        raise FailedPrecondition(f"{field} {path!r} is not an absolute path")
    if os.geteuid() != 0:
        fd = await asyncio.to_thread(_open_here, path, field, owner.name)
        await asyncio.to_thread(check_opened, fd, path, field, owner, also_uid=os.geteuid(), directory=directory)
        return fd
    fd = await _open_via_helper(owner, path, field, default_python(python))
    try:
        check_opened(fd, path, field, owner, directory=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    return fd


def _open_here(path: str, field: str, owner: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _refusal(exc.errno or errno.EIO, path, field, owner) from None


async def _open_via_helper(owner: UnixAccount, path: str, field: str, python: str) -> int:
    if not _SETPRIV:
        raise FailedPrecondition("setpriv (util-linux) is not installed: cannot open files as the job's user")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    # The helper's stderr goes to a pipe of our own and stdin/stdout to _DEVNULL: asyncio would
    # open /dev/null and wrap a pipe in a file object on the event loop for every call.
    err_r, err_w = os.pipe()
    try:
        os.set_blocking(err_r, False)
        groups = ["--groups=" + ",".join(map(str, owner.groups))] if owner.groups else ["--clear-groups"]
        argv = [
            _SETPRIV,
            f"--reuid={owner.uid}",
            f"--regid={owner.gid}",
            *groups,
            "--",
            python,
            "-I",
            "-S",
            "-c",
            _OPENER,
            str(theirs.fileno()),
            path,
        ]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=_DEVNULL,
                stdout=_DEVNULL,
                stderr=err_w,
                pass_fds=(theirs.fileno(),),
                env={"LANG": "C.UTF-8"},
                cwd="/",
            )
        except OSError as exc:
            raise FailedPrecondition(f"cannot start the file opener ({python}): {exc.strerror}") from exc
        theirs.close()
        os.close(err_w)
        err_w = -1
        try:
            await asyncio.wait_for(proc.wait(), _TIMEOUT)
        except BaseException as exc:  # the timeout, or the caller gave up: the helper goes too
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
            if isinstance(exc, TimeoutError):
                raise FailedPrecondition(f"{field} {path}: opening it took more than {_TIMEOUT:g}s") from None
            raise
        ours.setblocking(False)
        try:
            msg, fds, _flags, _addr = socket.recv_fds(ours, 64, 1)
        except BlockingIOError:
            msg, fds = b"", []
        if not msg and not fds:  # it never answered: setpriv or the interpreter failed
            said = _read_some(err_r).decode(errors="replace").strip().splitlines()
            raise FailedPrecondition(
                f"{field} {path}: the opener running as {owner.name} failed: "
                f"{said[-1] if said else f'exit {proc.returncode}'}"
            ) from None
        if fds:
            if msg == b"K" and len(fds) == 1:
                return fds[0]
            for fd in fds:
                os.close(fd)
        if msg.startswith(b"E") and msg[1:].isdigit():
            raise _refusal(int(msg[1:]), path, field, owner.name)
        raise FailedPrecondition(f"{field} {path}: unexpected answer from the opener")
    finally:
        ours.close()
        theirs.close()
        os.close(err_r)
        if err_w >= 0:
            os.close(err_w)


def _read_some(fd: int) -> bytes:
    """What a non-blocking pipe holds now (the exited helper's last words), at most 4 KiB."""
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


def owner_of(user: str) -> UnixAccount:
    """``user``'s uid, gid and groups (clusterd.accounts: blocking on a miss; call in a worker thread).

    Raises FailedPrecondition when the user has no account on clusterd's host.
    """
    try:
        return accounts.lookup(user)
    except KeyError:
        raise FailedPrecondition(f"user {user!r} has no Unix account on clusterd's host") from None
