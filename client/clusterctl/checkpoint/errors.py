"""Checkpoint errors: one root, :class:`CheckpointError`, and one subclass per thing that can go wrong.

Storage failures are :class:`clusterctl.storage.StorageError`; the checkpoint layer wraps the ones
that end a save in :class:`SaveError` (naming rank, step, object and cause) and keeps the storage
error as ``__cause__``.
"""

from __future__ import annotations

from ..errors import ClusterctlError


class CheckpointError(ClusterctlError):
    """Root of all checkpoint errors (a :class:`~clusterctl.errors.ClusterctlError`)."""


class InvalidStateError(CheckpointError, ValueError):
    """The state cannot be saved: unsafe key, unsupported leaf type (would need pickle), bad step."""


class SaveError(CheckpointError):
    """A save failed in the background.

    Attributes:
        rank: the rank whose save failed.
        step: the step being saved.
        key: the object key being written or read when it failed (None when not tied to one).
    """

    def __init__(self, message: str, *, rank: int, step: int, key: str | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.step = step
        self.key = key


class DuplicateWriterError(SaveError):
    """Two processes saved the same rank of the same step (their rank was resolved wrongly).

    Attributes:
        writers: both writers, as ``host pid N (id)``: the one that claimed the rank first, then this one.
    """

    def __init__(
        self, message: str, *, rank: int, step: int, key: str | None = None, writers: tuple[str, str] = ("", "")
    ) -> None:
        super().__init__(message, rank=rank, step=step, key=key)
        self.writers = writers


class SaveInProgressError(CheckpointError):
    """``policy="raise"`` and a previous save is still uploading."""


class StagingLimitError(CheckpointError):
    """The snapshot does not fit in the configured staging memory."""


class CommitTimeoutError(SaveError):
    """Rank 0 did not see every shard manifest (or another rank did not see the commit) in time."""


class RestoreError(CheckpointError):
    """Nothing could be restored (no valid step, or the requested step is not committed)."""


class CorruptCheckpointError(RestoreError):
    """A committed step failed verification: missing, truncated or corrupted object.

    Attributes:
        step: the step that failed.
        key: the object that failed verification.
    """

    def __init__(self, message: str, *, step: int, key: str | None = None) -> None:
        super().__init__(message)
        self.step = step
        self.key = key


class WorldSizeMismatchError(RestoreError):
    """The checkpoint was saved by a different number of ranks than are restoring it."""

    def __init__(self, message: str, *, saved: int, current: int) -> None:
        super().__init__(message)
        self.saved = saved
        self.current = current


class CheckpointFallbackWarning(UserWarning):
    """restore() skipped a corrupt committed step and fell back to an older one."""
