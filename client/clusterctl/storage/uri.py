"""Parsing of checkpoint URIs: ``s3://bucket/prefix``, ``file:///abs/path`` or a plain path.

Parsing is pure (no I/O) so bad input is refused before anything touches the network or disk,
with a message that says what is wrong and what was expected.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from .base import validate_key
from .errors import InvalidKeyError, InvalidURIError

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]\Z")
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


@dataclass(frozen=True)
class StorageURI:
    """A parsed checkpoint location.

    Attributes:
        scheme: ``"s3"`` or ``"file"``.
        bucket: the S3 bucket (``None`` for files).
        prefix: the S3 key prefix without leading/trailing ``/`` (may be empty), or for files
            the absolute directory path.
    """

    scheme: Literal["s3", "file"]
    bucket: str | None
    prefix: str

    def __str__(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return self.prefix


def _check_chars(uri: str) -> None:
    if "\\" in uri:
        raise InvalidURIError(f"invalid checkpoint URI {uri!r}: backslashes are not allowed")
    for ch in uri:
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            raise InvalidURIError(f"invalid checkpoint URI {uri!r}: contains a control character")


def _check_path(uri: str, path: str) -> str:
    if not path.startswith("/"):
        raise InvalidURIError(f"invalid checkpoint URI {uri!r}: file URIs need an absolute path")
    if any(seg == ".." for seg in path.split("/")):
        raise InvalidURIError(f"invalid checkpoint URI {uri!r}: '..' path segments are refused")
    return os.path.normpath(path)


def parse_uri(uri: str) -> StorageURI:
    """Parse and validate a checkpoint URI.

    Accepted: ``s3://bucket`` and ``s3://bucket/some/prefix`` (trailing ``/`` ignored),
    ``file:///absolute/dir``, ``file://localhost/absolute/dir``, and plain paths (relative paths
    are made absolute against the current directory).

    Raises:
        InvalidURIError: empty input, unknown scheme, bad bucket name, query strings, ``..``
            segments, backslashes or control characters; the message names the problem.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidURIError("invalid checkpoint URI: it is empty")
    _check_chars(uri)
    m = _SCHEME_RE.match(uri)
    if m is None:
        if "://" in uri or uri.startswith("file:"):
            raise InvalidURIError(f"invalid checkpoint URI {uri!r}: malformed scheme")
        if any(seg == ".." for seg in uri.split("/")):
            raise InvalidURIError(f"invalid checkpoint URI {uri!r}: '..' path segments are refused")
        return StorageURI("file", None, os.path.abspath(uri))
    scheme = m.group(1).lower()
    rest = uri[m.end() :]
    if "?" in rest or "#" in rest:
        raise InvalidURIError(f"invalid checkpoint URI {uri!r}: query strings and fragments are not supported")
    if scheme == "file":
        host, slash, path = rest.partition("/")
        if host not in ("", "localhost"):
            raise InvalidURIError(
                f"invalid checkpoint URI {uri!r}: file URIs must be local (file:///path), got host {host!r}"
            )
        return StorageURI("file", None, _check_path(uri, slash + path))
    if scheme != "s3":
        raise InvalidURIError(
            f"invalid checkpoint URI {uri!r}: unsupported scheme {scheme!r} "
            "(expected s3://bucket/prefix, file:///path or a filesystem path)"
        )
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise InvalidURIError(f"invalid checkpoint URI {uri!r}: no bucket name after s3://")
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise InvalidURIError(
            f"invalid checkpoint URI {uri!r}: {bucket!r} is not a valid bucket name "
            "(3-63 characters: lowercase letters, digits, '.', '-', '_')"
        )
    prefix = prefix.strip("/")
    try:
        validate_key(prefix, allow_empty=True, what="prefix")
    except InvalidKeyError as exc:
        raise InvalidURIError(f"invalid checkpoint URI {uri!r}: {exc}") from None
    return StorageURI("s3", bucket, prefix)
