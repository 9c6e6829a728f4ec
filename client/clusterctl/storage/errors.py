"""Errors raised by storage backends.

One root, :class:`StorageError`, so callers (the checkpoint manager, the CLI) can catch every
storage failure in one place. Each error carries the object key it concerns (when there is one)
so messages can name it. Transient failures are retried inside the backends; what escapes is
either permanent or the last transient error once the retry budget is spent.
"""

from __future__ import annotations

from ..errors import ClusterctlError


class StorageError(ClusterctlError):
    """Root of all storage errors (a :class:`~clusterctl.errors.ClusterctlError`).

    Attributes:
        key: the object key concerned, relative to the storage root, or None.
        retryable: True when the cause was transient (timeouts, 5xx, throttling) and the
            operation was given up only because its retry budget ran out.
    """

    def __init__(self, message: str, *, key: str | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.key = key
        self.retryable = retryable


class InvalidURIError(StorageError, ValueError):
    """A checkpoint URI could not be parsed or names an unsupported scheme."""


class InvalidKeyError(StorageError, ValueError):
    """An object key (or a prefix) is unsafe: path traversal, absolute, control characters."""


class ObjectNotFoundError(StorageError):
    """The object (or the bucket) does not exist."""


class ObjectExistsError(StorageError):
    """A create-only write found the object already there (If-None-Match precondition)."""


class AccessDeniedError(StorageError):
    """Credentials were refused; retrying will not help."""


class StorageUnavailableError(StorageError):
    """The store could not be reached or kept failing transiently until the retry budget ran out."""
