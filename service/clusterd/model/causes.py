"""Why a job restarts or stops: the cause a restart records and the final cause of a finished job.

The values are the names the store keeps and the metrics label with; a StrEnum, so a cause is also
its name wherever a string is expected.
"""

from __future__ import annotations

import enum


class Cause(enum.StrEnum):
    NODE_FAILURE = "NODE_FAILURE"
    PREEMPTED = "PREEMPTED"
    TIME_LIMIT = "TIME_LIMIT"
    EXIT_CODE = "EXIT_CODE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    CANCELLED = "CANCELLED"
    COMPLETED = "COMPLETED"
    MANUAL_REQUEUE = "MANUAL_REQUEUE"  # a user's requeue: not counted against the restart budget
    NO_PROGRESS = "NO_PROGRESS"
    RESTARTS_EXHAUSTED = "RESTARTS_EXHAUSTED"
    REQUEUE_REQUESTED = "REQUEUE_REQUESTED"  # exit 85: the job checkpointed and asked to come back
    RANK_HUNG = "RANK_HUNG"  # a rank stopped beating while its node answered (clusterd.liveness)
    RANK_FAILED = "RANK_FAILED"  # a rank of a multi-rank job crashed while its node stayed up
    STRAGGLER = "STRAGGLER"  # a straggler node was left out: it cost more than a restart (liveness.eviction)
