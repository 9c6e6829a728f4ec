"""Errors of the memory tier (one root, so callers can catch the tier as a whole)."""

from __future__ import annotations

from ..storage.errors import StorageError


class TierError(StorageError):
    """A memory tier refused or failed a request (a StorageError, so the checkpoint layer wraps it)."""


class TierAuthError(TierError):
    """The peer is not a tier of this job, or the caller is not one of its ranks (wrong secret)."""


class TierCorruptError(TierError):
    """A copy failed its content hash (in the tier's memory or on the wire); try the next source."""


class TierFullError(TierError):
    """One step does not fit the tier's memory cap even after every older step was dropped."""


class TierUnavailableError(TierError):
    """The tier (or too few peers for the replica count) could not be reached."""


class TierBusyError(TierUnavailableError):
    """The tier closed a connection before its login: its logins in progress are at their cap."""
