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
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .base import Buffer, IncompleteUpload, ObjectInfo, validate_key
from .errors import AccessDeniedError, InvalidKeyError, ObjectExistsError, ObjectNotFoundError, StorageError
from .threads import nice_initializer, run_all

log = logging.getLogger(__name__)

TMP_MARK = ".clusterctl-tmp-"


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
        self._pool = ThreadPoolExecutor(max_workers=max(1, self.options.max_concurrency),
                                        thread_name_prefix="posix-io",
                                        initializer=nice_initializer(self.options.thread_nice))
        self._lfs = shutil.which("lfs")

    @property
    def uri(self) -> str:
        return self.root

    def _path(self, key: str, *, allow_empty: bool = False) -> str:
        """The file for ``key``, refusing symbolic links below the root.

        A link planted inside a checkpoint directory must not let a read or write reach outside it.
        """
        validate_key(key, allow_empty=allow_empty)
        path = self.root
        for part in (s for s in key.split("/") if s):
            path = os.path.join(path, part)
            if os.path.islink(path):
                raise InvalidKeyError(f"{key}: {path} is a symbolic link; checkpoint paths never follow links",
                                      key=key)  # fmt: skip
        return path

    def _fsync_dir(self, path: str) -> None:
        if not self.options.fsync:
            return
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_all(self, fd: int, data: memoryview) -> None:
        part = self.options.part_size
        n = len(data)

        def write_range(start: int) -> None:
            view = data[start:min(start + part, n)]
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
        path = self._path(key)
        directory = os.path.dirname(path)
        tmp = f"{path}{TMP_MARK}{uuid.uuid4().hex}"
        try:
            os.makedirs(directory, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                self._write_all(fd, memoryview(data).cast("B"))
                if self.options.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if if_absent:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise ObjectExistsError(f"{key} already exists", key=key) from None
            else:
                os.replace(tmp, path)
            self._fsync_dir(directory)
        except OSError as exc:
            raise _oserror(exc, key) from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def get(self, key: str, *, max_size: int | None = None) -> bytes:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if max_size is not None and size > max_size:
                    raise StorageError(f"{key} is {size} bytes, more than the {max_size} expected", key=key)
                return f.read()
        except OSError as exc:
            raise _oserror(exc, key) from exc

    def read_into(self, key: str, out: memoryview, *, offset: int = 0) -> None:
        path = self._path(key)
        out = out.cast("B")
        part = self.options.part_size

        def read_range(fd: int, start: int) -> None:
            view = out[start:min(start + part, len(out))]
            pos = offset + start
            while len(view):
                got = os.preadv(fd, [view], pos)
                if got == 0:
                    raise StorageError(f"{key}: unexpected end of file at byte {pos}", key=key)
                view = view[got:]
                pos += got

        try:
            fd = os.open(path, os.O_RDONLY)
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
            st = os.stat(self._path(key))
        except OSError as exc:
            raise _oserror(exc, key) from exc
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def _walk(self, prefix: str) -> Iterator[tuple[str, os.DirEntry[str]]]:
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self._path(base, allow_empty=True)

        def rec(directory: str, rel: str) -> Iterator[tuple[str, os.DirEntry[str]]]:
            try:
                entries = list(os.scandir(directory))
            except FileNotFoundError:
                return
            for entry in entries:
                key = f"{rel}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    if key.startswith(prefix) or prefix.startswith(key + "/"):
                        yield from rec(entry.path, key + "/")
                elif entry.is_file(follow_symlinks=False) and key.startswith(prefix):
                    yield key, entry

        try:
            yield from rec(start, f"{base}/" if base else "")
        except OSError as exc:
            raise _oserror(exc, prefix) from exc

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        validate_key(prefix, allow_empty=True, what="prefix")
        out = []
        for key, entry in self._walk(prefix):
            if TMP_MARK in key.rsplit("/", 1)[-1]:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            out.append(ObjectInfo(key, st.st_size, st.st_mtime))
        return sorted(out, key=lambda o: o.key)

    def delete(self, keys: Sequence[str]) -> None:
        dirs = set()
        for key in keys:
            path = self._path(key)
            try:
                os.unlink(path)
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
        for key, entry in self._walk(prefix):
            directory, _, name = key.rpartition("/")
            if TMP_MARK not in name:
                continue
            target = name.split(TMP_MARK, 1)[0]
            try:
                started = entry.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue
            out.append(IncompleteUpload(f"{directory}/{target}" if directory else target, key, started))
        return out

    def abort_incomplete(self, upload: IncompleteUpload) -> None:
        path = self._path(upload.handle)
        if TMP_MARK not in os.path.basename(path):
            raise StorageError(f"{upload.handle} is not a temp file", key=upload.handle)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
