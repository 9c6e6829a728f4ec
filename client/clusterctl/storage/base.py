"""The storage seam: what the checkpoint layer needs from an object store, and nothing more.

Backends (``s3``, ``posix``, ``memory``) implement :class:`Storage`. Keys are relative to the
root the backend was opened on (an S3 ``bucket/prefix`` or a directory) and always use ``/``.
Every key is validated with :func:`validate_key` before it reaches a backend's I/O, so an
untrusted manifest cannot make a backend read or write outside its root.

Semantics every backend provides:

* ``put`` is all-or-nothing: a reader never sees a partially written object (S3 multipart
  completes atomically; POSIX writes a temp file and renames it).
* ``put(..., if_absent=True)`` is create-only: it raises :class:`ObjectExistsError` when the
  object exists (S3 ``If-None-Match: *``; POSIX ``link()`` of the temp file).
* ``list_objects`` is recursive over everything whose key starts with ``prefix``; incomplete writes
  (multipart uploads, temp files) are not listed there but by ``list_incomplete``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .errors import InvalidKeyError

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object: key relative to the storage root, size in bytes, mtime (epoch s)."""

    key: str
    size: int
    mtime: float


@dataclass(frozen=True)
class IncompleteUpload:
    """A write that was started and never finished (orphaned multipart upload, temp file).

    ``handle`` is backend specific (an S3 UploadId, a temp file path) and only meaningful to
    the backend that listed it.
    """

    key: str
    handle: str
    started: float


@runtime_checkable
class Storage(Protocol):
    """A flat key/value object store rooted at one URI."""

    @property
    def uri(self) -> str:
        """The root this storage was opened on, for messages (``s3://b/p``, ``/data/ckpt``)."""
        ...

    def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
        """Store ``data`` under ``key`` atomically (large data goes up in parallel parts).

        Raises:
            ObjectExistsError: ``if_absent`` and the object exists.
            StorageError: anything else, after retries of transient failures.
        """
        ...

    def get(self, key: str, *, max_size: int | None = None) -> bytes:
        """Read a whole (small) object. ``max_size`` guards against huge untrusted objects.

        Raises:
            ObjectNotFoundError: no such object.
            StorageError: the object is larger than ``max_size``, or the read failed.
        """
        ...

    def read_into(self, key: str, out: memoryview, *, offset: int = 0) -> None:
        """Fill ``out`` with bytes ``[offset, offset + len(out))`` of the object (parallel ranges).

        Raises:
            ObjectNotFoundError: no such object.
            StorageError: the object is shorter than requested, or the read failed.
        """
        ...

    def stat(self, key: str) -> ObjectInfo:
        """Size and mtime of one object. Raises ObjectNotFoundError."""
        ...

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        """Every complete object whose key starts with ``prefix`` (recursive), sorted by key."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Delete objects; keys that do not exist are ignored."""
        ...

    def prepare_prefix(self, prefix: str) -> None:
        """Hint that large objects will be written under ``prefix`` (POSIX: mkdir + Lustre striping)."""
        ...

    def list_incomplete(self, prefix: str) -> list[IncompleteUpload]:
        """Writes under ``prefix`` that were started and never completed."""
        ...

    def abort_incomplete(self, upload: IncompleteUpload) -> None:
        """Discard one incomplete write (abort the multipart upload, delete the temp file)."""
        ...

    def close(self) -> None:
        """Release connections and worker threads."""
        ...


def validate_key(key: str, *, allow_empty: bool = False, what: str = "key") -> str:
    """Check that ``key`` is a safe relative object key and return it unchanged.

    Refused: empty keys (unless ``allow_empty``), absolute keys, ``.`` or ``..`` segments, empty
    segments (``a//b``), backslashes, NUL/control characters. A trailing ``/`` is allowed so
    prefixes can be validated too. These rules make a key mean the same object on S3 and on a
    filesystem, and make path traversal impossible whatever a manifest says.

    Raises:
        InvalidKeyError: with the reason.
    """
    if not isinstance(key, str):
        raise InvalidKeyError(f"{what} must be a string, got {type(key).__name__}")
    if key == "":
        if allow_empty:
            return key
        raise InvalidKeyError(f"{what} is empty")
    if "\\" in key:
        raise InvalidKeyError(f"{what} {key!r} contains a backslash", key=key)
    for ch in key:
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            raise InvalidKeyError(f"{what} {key!r} contains a control character", key=key)
    if key.startswith("/") or (len(key) > 1 and key[1] == ":"):
        raise InvalidKeyError(f"{what} {key!r} is absolute", key=key)
    body = key[:-1] if key.endswith("/") else key
    for segment in body.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidKeyError(
                f"{what} {key!r} has an empty, '.' or '..' path segment (path traversal refused)", key=key
            )
    if len(key.encode("utf-8")) > 1024:
        raise InvalidKeyError(f"{what} {key[:40]!r}... is longer than 1024 bytes", key=key)
    return key
