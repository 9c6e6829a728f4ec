"""Read below a directory a user opened, from a root service, without trusting a path twice.

The directory is opened once with the user's rights (useropen.open_as: the kernel checks the
user's access, the service checks the user owns it). Everything below it is reached from that
descriptor one component at a time, each first opened ``O_PATH | O_NOFOLLOW``: that has no side
effect whatever the entry is (a FIFO does not block, a device is not opened, a symbolic link is
the link itself). Its ``fstat`` must show a directory or regular file the user owns; only then is
that same inode reopened for reading, through ``/proc/self/fd``. A link swapped in after a check,
a FIFO, root's or another user's file are refused with AccessDeniedError, never read, and no name
is looked up twice. Read-only: a view never writes into a user's directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator, Sequence

from clusterctl.storage.base import Buffer, IncompleteUpload, ObjectInfo, validate_key
from clusterctl.storage.errors import AccessDeniedError, ObjectNotFoundError, StorageError
from clusterctl.storage.posix import MAX_LIST_DEPTH, TMP_MARK
from clusterd.accounts import UnixAccount
from clusterd.security.useropen import open_as

_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _refused(exc: OSError, key: str) -> StorageError:
    if exc.errno == errno.ENOENT:
        return ObjectNotFoundError(f"{key}: not found", key=key)
    return StorageError(f"{key}: {exc.strerror or exc}", key=key)


def open_checked(dir_fd: int, name: str, uids: frozenset[int], *, directory: bool, key: str = "") -> int:
    """A descriptor open for reading of ``name`` in ``dir_fd``: a directory (``directory``) or a
    regular file whose owner is in ``uids``, never through a link. The caller closes it.

    Raises ObjectNotFoundError, AccessDeniedError (a link, a FIFO or device, another owner), StorageError.
    """
    key = key or name
    try:
        path_fd = os.open(name, _PATH, dir_fd=dir_fd)
    except OSError as exc:
        raise _refused(exc, key) from None
    try:
        st = os.fstat(path_fd)
        kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
        if not kind_ok or st.st_uid not in uids:
            what = "directory" if directory else "regular file"
            raise AccessDeniedError(
                f"{key}: not a {what} of the job's user (uid {st.st_uid}, mode {stat.filemode(st.st_mode)}); not read",
                key=key,
            )
        try:
            return os.open(f"/proc/self/fd/{path_fd}", _READ | (os.O_DIRECTORY if directory else 0))
        except OSError as exc:
            raise _refused(exc, key) from None
    finally:
        os.close(path_fd)


class UserDirStorage:
    """The read side of the storage seam over a directory descriptor the job's user opened.

    Owns ``root_fd`` (closed by :meth:`close`). ``uids``: whose files may be read (the job's user;
    also the service's own uid when it is not root and opened the directory itself).
    """

    def __init__(self, root_fd: int, uids: frozenset[int], uri: str) -> None:
        self._root = root_fd
        self._uids = uids
        self._uri = uri

    @property
    def uri(self) -> str:
        return self._uri

    @contextlib.contextmanager
    def _dir(self, parts: Sequence[str], key: str) -> Iterator[int]:
        """A checked descriptor of the directory ``parts`` below the root."""
        fd = os.dup(self._root)
        try:
            for part in parts:
                child = open_checked(fd, part, self._uids, directory=True, key=key)
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def open_dir(self, key: str) -> int:
        """A checked descriptor, open for reading, of the user's directory ``key``; the caller closes it."""
        validate_key(key)
        *dirs, name = key.split("/")
        with self._dir(dirs, key) as dfd:
            return open_checked(dfd, name, self._uids, directory=True, key=key)

    def _file(self, key: str) -> int:
        validate_key(key)
        *dirs, name = key.split("/")
        with self._dir(dirs, key) as dfd:
            return open_checked(dfd, name, self._uids, directory=False, key=key)

    def get(self, key: str, *, max_size: int | None = None) -> bytes:
        fd = self._file(key)
        try:
            size = os.fstat(fd).st_size
            if max_size is not None and size > max_size:
                raise StorageError(f"{key} is {size} bytes, more than the {max_size} expected", key=key)
            chunks, got = [], 0
            while got < size:
                data = os.pread(fd, size - got, got)
                if not data:
                    break
                chunks.append(data)
                got += len(data)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_into(self, key: str, out: memoryview, *, offset: int = 0) -> None:
        view = out.cast("B")
        fd = self._file(key)
        try:
            size = os.fstat(fd).st_size
            if offset + len(view) > size:
                raise StorageError(f"{key} is {size} bytes, cannot read [{offset}, {offset + len(view)})", key=key)
            pos = offset
            while len(view):
                got = os.preadv(fd, [view], pos)
                if got == 0:
                    raise StorageError(f"{key}: unexpected end of file at byte {pos}", key=key)
                view, pos = view[got:], pos + got
        finally:
            os.close(fd)

    def stat(self, key: str) -> ObjectInfo:
        fd = self._file(key)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        """Regular files below the root whose key starts with ``prefix``, descending only into the
        user's own directories, at most ``MAX_LIST_DEPTH`` levels, never through a link."""
        validate_key(prefix, allow_empty=True, what="prefix")
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        parts = [p for p in base.split("/") if p]
        out: list[ObjectInfo] = []
        try:
            with self._dir(parts, prefix) as start:
                self._walk(os.dup(start), f"{base}/" if base else "", prefix, 0, out.append)
        except ObjectNotFoundError:
            return []
        return sorted(out, key=lambda o: o.key)

    def _walk(self, fd: int, rel: str, prefix: str, depth: int, found: Callable[[ObjectInfo], None]) -> None:
        subdirs: list[str] = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    key = f"{rel}{entry.name}"
                    if entry.is_dir(follow_symlinks=False):
                        if key.startswith(prefix) or prefix.startswith(key + "/"):
                            subdirs.append(entry.name)
                    elif entry.is_file(follow_symlinks=False) and key.startswith(prefix) and TMP_MARK not in entry.name:
                        with contextlib.suppress(FileNotFoundError):
                            st = entry.stat(follow_symlinks=False)
                            found(ObjectInfo(key, st.st_size, st.st_mtime))
            for name in sorted(subdirs) if depth < MAX_LIST_DEPTH else ():
                try:
                    child = open_checked(fd, name, self._uids, directory=True, key=f"{rel}{name}")
                except StorageError:
                    continue  # not the user's, or gone since it was listed
                self._walk(child, f"{rel}{name}/", prefix, depth + 1, found)
        finally:
            os.close(fd)

    def _read_only(self, what: str) -> StorageError:
        return AccessDeniedError(f"{self._uri}: {what} refused: the service only reads a user's directory")

    def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
        raise self._read_only("put")

    def delete(self, keys: Sequence[str]) -> None:
        raise self._read_only("delete")

    def prepare_prefix(self, prefix: str) -> None:
        raise self._read_only("prepare_prefix")

    def list_incomplete(self, prefix: str) -> list[IncompleteUpload]:
        return []

    def abort_incomplete(self, upload: IncompleteUpload) -> None:
        raise self._read_only("abort_incomplete")

    def close(self) -> None:
        if self._root >= 0:
            os.close(self._root)
            self._root = -1


async def open_user_dir(owner: UnixAccount, path: str, uri: str, *, field: str, python: str = "") -> UserDirStorage:
    """``path`` opened as ``owner`` (a directory of theirs, else refused like useropen.open_as) and
    read below only through that descriptor; ``uri`` names it in messages. The caller closes it."""
    fd = await open_as(owner, path, field=field, python=python, directory=True)
    euid = os.geteuid()
    return UserDirStorage(fd, frozenset({owner.uid} if euid == 0 else {owner.uid, euid}), uri)
