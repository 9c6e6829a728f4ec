"""POSIX filesystem backend (local disk, NFS, Lustre).

Objects are plain files under a root directory; ``a/b/c`` is ``<root>/a/b/c``. Writes go to a
temp file beside the target (``<name>.clusterctl-tmp-<hex>``), are fsynced, then renamed over
the target (or hard-linked for create-only writes, which fail atomically when the target
exists), and the directory is fsynced so the rename survives a crash. Large objects are written
and read with parallel ``pwrite``/``preadv`` calls of ``part_size`` bytes.

On Lustre (``lfs`` on PATH) :meth:`PosixStorage.prepare_prefix` stripes a step directory with
the configured stripe count and size before the shards are written into it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .base import Buffer, IncompleteUpload, ObjectInfo, validate_key
from .errors import AccessDeniedError, InvalidKeyError, ObjectExistsError, ObjectNotFoundError, StorageError
from .threads import nice_initializer, read_part_size, run_all

log = logging.getLogger(__name__)

TMP_MARK = ".clusterctl-tmp-"
MAX_LIST_DEPTH = 32  # the checkpoint layout is 3 levels deep; anything far deeper is not ours
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)


@dataclass(frozen=True)
class PosixOptions:
    """Tuning for the POSIX backend.

    Attributes:
        part_size: bytes per parallel pwrite/pread.
        max_concurrency: parallel part writers/readers (bounded thread pool).
        fsync: fsync files and directories (turn off only for throwaway tests).
        stripe_count: Lustre stripe count for step directories (-1 = all OSTs); None = inherit.
        stripe_size: Lustre stripe size in bytes; None = inherit.
        thread_nice: nice increment of the I/O worker threads (0 = same priority as the caller).
    """

    part_size: int = 64 << 20
    max_concurrency: int = 4
    fsync: bool = True
    stripe_count: int | None = -1
    stripe_size: int | None = 16 << 20
    thread_nice: int = 0


def _oserror(exc: OSError, key: str) -> StorageError:
    if isinstance(exc, FileNotFoundError):
        return ObjectNotFoundError(f"{key}: not found ({exc.strerror})", key=key)
    if isinstance(exc, PermissionError):
        return AccessDeniedError(f"{key}: permission denied ({exc.strerror})", key=key)
    return StorageError(f"{key}: {exc.strerror or exc}", key=key, retryable=exc.errno in (errno.EIO, errno.EAGAIN))


class PosixStorage:
    """Objects as files under ``root``."""

    def __init__(self, root: str, options: PosixOptions | None = None) -> None:
        self.root = os.path.abspath(root)
        self.options = options or PosixOptions()
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, self.options.max_concurrency),
            thread_name_prefix="posix-io",
            initializer=nice_initializer(self.options.thread_nice),
        )
        self._lfs = shutil.which("lfs")

    @property
    def uri(self) -> str:
        return self.root

    def _path(self, key: str, *, allow_empty: bool = False) -> str:
        """The file for ``key`` (for messages and ``lfs``); I/O goes through :meth:`_parent`."""
        validate_key(key, allow_empty=allow_empty)
        return os.path.join(self.root, *[s for s in key.split("/") if s])

    @contextlib.contextmanager
    def _parent(self, key: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """``(fd of the directory holding key, file name)``, walked with ``O_NOFOLLOW`` one component
        at a time, so a symbolic link planted below the root (even between a check and a use) is never
        followed. ``create`` makes missing directories, fsyncing each parent so they survive a crash.

        Raises:
            InvalidKeyError: a component is a symbolic link (or not a directory).
            OSError: anything else (FileNotFoundError when a directory is missing).
        """
        validate_key(key)
        *dirs, name = key.split("/")
        if create:
            os.makedirs(self.root, exist_ok=True)
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in dirs:
                try:
                    child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                        if self.options.fsync:
                            os.fsync(fd)
                    child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise InvalidKeyError(
                            f"{key}: {part!r} is a symbolic link or not a directory; "
                            "checkpoint paths never follow links",
                            key=key,
                        ) from None
                    raise
                os.close(fd)
                fd = child
            yield fd, name
        finally:
            os.close(fd)

    def _open(self, key: str, flags: int, mode: int = 0o644) -> int:
        """Open ``key`` itself without following a link (ELOOP -> InvalidKeyError)."""
        with self._parent(key) as (dfd, name):
            try:
                return os.open(name, flags | _NOFOLLOW, mode, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise InvalidKeyError(
                        f"{key} is a symbolic link; checkpoint paths never follow links", key=key
                    ) from None
                raise

    def _write_all(self, fd: int, data: memoryview) -> None:
        part = self.options.part_size
        n = len(data)

        def write_range(start: int) -> None:
            view = data[start : min(start + part, n)]
            pos = start
            while len(view):
                written = os.pwrite(fd, view, pos)
                view = view[written:]
                pos += written

        if n <= part or self.options.max_concurrency <= 1:
            for start in range(0, n, part):
                write_range(start)
            return
        os.ftruncate(fd, n)
        run_all(self._pool, write_range, [(s,) for s in range(0, n, part)])

    def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
        tmp = f"{key.rsplit('/', 1)[-1]}{TMP_MARK}{uuid.uuid4().hex}"
        try:
            with self._parent(key, create=True) as (dfd, name):
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=dfd)
                try:
                    try:
                        self._write_all(fd, memoryview(data).cast("B"))
                        if self.options.fsync:
                            os.fsync(fd)
                    finally:
                        os.close(fd)
                    if if_absent:
                        try:
                            os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                        except FileExistsError:
                            raise ObjectExistsError(f"{key} already exists", key=key) from None
                    else:
                        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                    if self.options.fsync:
                        os.fsync(dfd)
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp, dir_fd=dfd)
        except OSError as exc:
            raise _oserror(exc, key) from exc

    def get(self, key: str, *, max_size: int | None = None) -> bytes:
        try:
            with open(self._open(key, os.O_RDONLY), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if max_size is not None and size > max_size:
                    raise StorageError(f"{key} is {size} bytes, more than the {max_size} expected", key=key)
                return f.read()
        except OSError as exc:
            raise _oserror(exc, key) from exc

    def read_into(self, key: str, out: memoryview, *, offset: int = 0) -> None:
        out = out.cast("B")
        part = read_part_size(len(out), self.options.part_size, self.options.max_concurrency)

        def read_range(fd: int, start: int) -> None:
            view = out[start : min(start + part, len(out))]
            pos = offset + start
            while len(view):
                got = os.preadv(fd, [view], pos)
                if got == 0:
                    raise StorageError(f"{key}: unexpected end of file at byte {pos}", key=key)
                view = view[got:]
                pos += got

        try:
            fd = self._open(key, os.O_RDONLY)
        except OSError as exc:
            raise _oserror(exc, key) from exc
        try:
            size = os.fstat(fd).st_size
            if offset + len(out) > size:
                raise StorageError(f"{key} is {size} bytes, cannot read [{offset}, {offset + len(out)})", key=key)
            starts = range(0, len(out), part)
            if len(starts) <= 1:
                for s in starts:
                    read_range(fd, s)
            else:
                run_all(self._pool, read_range, [(fd, s) for s in starts])
        except OSError as exc:
            raise _oserror(exc, key) from exc
        finally:
            os.close(fd)

    def stat(self, key: str) -> ObjectInfo:
        try:
            with self._parent(key) as (dfd, name):
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise InvalidKeyError(f"{key} is a symbolic link; checkpoint paths never follow links", key=key)
        except OSError as exc:
            raise _oserror(exc, key) from exc
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def _walk(self, prefix: str) -> Iterator[tuple[str, os.stat_result]]:
        """Files whose key starts with ``prefix``: iterative (no recursion limit), never through a
        link (directories are opened with ``O_NOFOLLOW``), and at most ``MAX_LIST_DEPTH`` levels deep,
        so a hostile tree can neither crash nor stall a listing by its depth."""
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        stack = [(self._path(base, allow_empty=True), f"{base}/" if base else "", 0)]
        while stack:
            directory, rel, depth = stack.pop()
            try:
                fd = os.open(directory, _DIR_FLAGS | _NOFOLLOW)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    continue  # replaced by a link since it was listed: skip it
                raise _oserror(exc, prefix) from exc
            files: list[tuple[str, os.stat_result]] = []
            dirs: list[str] = []
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        key = f"{rel}{entry.name}"
                        if entry.is_dir(follow_symlinks=False):
                            dirs.append(entry.name)
                        elif entry.is_file(follow_symlinks=False) and key.startswith(prefix):
                            with contextlib.suppress(FileNotFoundError):
                                files.append((key, entry.stat(follow_symlinks=False)))
            except OSError as exc:
                raise _oserror(exc, prefix) from exc
            finally:
                os.close(fd)
            yield from files
            for name in sorted(dirs, reverse=True):
                key = f"{rel}{name}"
                if not (key.startswith(prefix) or prefix.startswith(key + "/")):
                    continue
                if depth >= MAX_LIST_DEPTH:
                    log.warning(
                        "listing %s: %s is more than %d levels deep; not listed", self.root, key, MAX_LIST_DEPTH
                    )
                    continue
                stack.append((os.path.join(directory, name), key + "/", depth + 1))

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        validate_key(prefix, allow_empty=True, what="prefix")
        out = []
        for key, st in self._walk(prefix):
            if TMP_MARK in key.rsplit("/", 1)[-1]:
                continue
            out.append(ObjectInfo(key, st.st_size, st.st_mtime))
        return sorted(out, key=lambda o: o.key)

    def delete(self, keys: Sequence[str]) -> None:
        dirs = set()
        for key in keys:
            path = self._path(key)
            try:
                with self._parent(key) as (dfd, name):
                    os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _oserror(exc, key) from exc
            dirs.add(os.path.dirname(path))
        # Remove directories left empty (step dirs), never the root itself.
        for directory in sorted(dirs, key=len, reverse=True):
            while directory.startswith(self.root + os.sep):
                try:
                    os.rmdir(directory)
                except OSError:
                    break
                directory = os.path.dirname(directory)

    def prepare_prefix(self, prefix: str) -> None:
        path = self._path(prefix.rstrip("/"), allow_empty=True)
        existed = os.path.isdir(path)
        try:
            if prefix.strip("/"):
                with self._parent(prefix.rstrip("/") + "/", create=True):
                    pass
            else:
                os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise _oserror(exc, prefix) from exc
        opts = self.options
        if self._lfs and not existed and (opts.stripe_count is not None or opts.stripe_size is not None):
            argv = [self._lfs, "setstripe"]
            if opts.stripe_count is not None:
                argv += ["-c", str(opts.stripe_count)]
            if opts.stripe_size is not None:
                argv += ["-S", str(opts.stripe_size)]
            argv.append(path)
            try:
                res = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                log.warning("lfs setstripe on %s failed: %s", path, exc)
                return
            if res.returncode != 0:
                log.warning("lfs setstripe on %s failed (rc=%d): %s", path, res.returncode, res.stderr.strip())

    def list_incomplete(self, prefix: str) -> list[IncompleteUpload]:
        validate_key(prefix, allow_empty=True, what="prefix")
        out = []
        for key, st in self._walk(prefix):
            directory, _, name = key.rpartition("/")
            if TMP_MARK not in name:
                continue
            target = name.split(TMP_MARK, 1)[0]
            out.append(IncompleteUpload(f"{directory}/{target}" if directory else target, key, st.st_mtime))
        return out

    def abort_incomplete(self, upload: IncompleteUpload) -> None:
        if TMP_MARK not in upload.handle.rsplit("/", 1)[-1]:
            raise StorageError(f"{upload.handle} is not a temp file", key=upload.handle)
        try:
            with self._parent(upload.handle) as (dfd, name):
                os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _oserror(exc, upload.handle) from exc

    def close(self) -> None:
        self._pool.shutdown(wait=True)
