"""What a job event says happened; the values are the names the store's event log keeps."""

from __future__ import annotations

import enum


class EventType(enum.StrEnum):
    SNAPSHOT = "SNAPSHOT"  # a watcher's initial view of a job, never logged
    SUBMITTED = "SUBMITTED"
    STATE_CHANGED = "STATE_CHANGED"
    RESTARTED = "RESTARTED"
    FINISHED = "FINISHED"
    CHECKPOINT = "CHECKPOINT"
