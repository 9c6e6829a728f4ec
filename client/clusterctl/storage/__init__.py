"""Object storage behind one interface: S3 (botocore), POSIX files (Lustre-aware), in-memory (tests).

``open_storage(uri)`` picks the backend from the URI. See ``base.Storage`` for the semantics.
botocore (~100 ms to import) is imported only when an S3 URI is opened.
"""

from __future__ import annotations

from .base import IncompleteUpload, ObjectInfo, Storage, validate_key
from .errors import (
    AccessDeniedError,
    InvalidKeyError,
    InvalidURIError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)
from .memory import MemoryStorage
from .posix import PosixOptions, PosixStorage
from .s3options import S3Options
from .uri import StorageURI, parse_uri

__all__ = [
    "AccessDeniedError",
    "IncompleteUpload",
    "InvalidKeyError",
    "InvalidURIError",
    "MemoryStorage",
    "ObjectExistsError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "PosixOptions",
    "PosixStorage",
    "S3Options",
    "Storage",
    "StorageError",
    "StorageURI",
    "StorageUnavailableError",
    "open_storage",
    "parse_uri",
    "validate_key",
]


def open_storage(uri: str, *, s3: S3Options | None = None, posix: PosixOptions | None = None) -> Storage:
    """Open the backend a URI names (``s3://bucket/prefix``, ``file:///dir`` or a path).

    Raises:
        InvalidURIError: the URI is malformed or its scheme unsupported.
    """
    parsed = parse_uri(uri)
    if parsed.scheme == "s3":
        from .s3 import S3Storage

        assert parsed.bucket is not None
        return S3Storage(parsed.bucket, parsed.prefix, s3)
    return PosixStorage(parsed.prefix, posix)
