"""Async, sharded, verified checkpoints to S3 or a (parallel) filesystem.

Usage (the format on storage: FORMAT.md)::

    from clusterctl.checkpoint import CheckpointManager
    ckpt = CheckpointManager("s3://bucket/run-1", keep=3)
    state = ckpt.restore()              # newest valid step, or None
    h = ckpt.save(step, state)          # returns after the snapshot; uploads in the background
    h.result()                          # committed (or raises SaveError naming rank, object, cause)
    ckpt.close()
"""

from __future__ import annotations

from .config import CheckpointConfig
from .errors import (
    CheckpointError,
    CheckpointFallbackWarning,
    CommitTimeoutError,
    CorruptCheckpointError,
    DuplicateWriterError,
    InvalidStateError,
    RestoreError,
    SaveError,
    SaveInProgressError,
    StagingLimitError,
    WorldSizeMismatchError,
)
from .manager import CheckpointManager, SaveHandle, SaveResult
from .parallel import Replicated, Sharded

__all__ = [
    "CheckpointConfig",
    "CheckpointError",
    "CheckpointFallbackWarning",
    "CheckpointManager",
    "CommitTimeoutError",
    "CorruptCheckpointError",
    "DuplicateWriterError",
    "InvalidStateError",
    "Replicated",
    "RestoreError",
    "SaveError",
    "SaveHandle",
    "SaveInProgressError",
    "SaveResult",
    "Sharded",
    "StagingLimitError",
    "WorldSizeMismatchError",
]
