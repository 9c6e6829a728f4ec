"""What one user may hold in the store, and the decision a submission's reservation makes with it.

Pure logic, no SQL: the store reads a user's usage inside the reservation's transaction and calls
:func:`admit`, then reads only as many of the oldest finished records as the answer names, so
concurrent submissions cannot all pass one count.
Finished records are history, expendable oldest first; live ones are the user's work, never
dropped: when live work alone passes a bound the submission is refused, naming the limit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clusterd.errors import ResourceExhausted


@dataclass(frozen=True)
class UserBounds:
    """Per-user caps a reservation enforces; 0 turns one off."""

    max_live_tasks: int = 0  # queued + running tasks (an array of N counts N): limits.max_jobs_per_user
    max_spec_bytes: int = 0  # serialized specs kept, live and finished: limits.max_spec_bytes_per_user
    max_finished: int = 0  # finished records kept; older ones are pruned: limits.max_finished_per_user


@dataclass(frozen=True)
class Usage:
    """A user's live work and finished history, as counts and sums, never the records themselves
    (one indexed sum over the user's records, store/jobs.py)."""

    live_tasks: int
    live_spec_bytes: int
    finished: int  # finished records kept
    finished_spec_bytes: int


@dataclass(frozen=True)
class Prune:
    """How much of the oldest finished history must go for a submission to fit."""

    records: int  # at least this many of the oldest finished records
    spec_bytes: int  # and at least this many of their spec bytes

    @property
    def needed(self) -> bool:
        return self.records > 0 or self.spec_bytes > 0

    @property
    def rows(self) -> int | None:
        """How many of the oldest finished records the store must read to choose (None: all of them)."""
        return None if self.spec_bytes > 0 else self.records

    def choose(self, oldest: Iterable[tuple[int, int]]) -> list[int]:
        """The record ids to prune from ``(record_id, spec_bytes)`` of finished records, oldest first."""
        prune: list[int] = []
        freed = 0
        for record_id, size in oldest:
            if len(prune) >= self.records and freed >= self.spec_bytes:
                break
            prune.append(record_id)
            freed += size
        return prune


def admit(bounds: UserBounds, usage: Usage, *, user: str, tasks: int, spec_bytes: int) -> Prune:
    """What to prune so the new submission fits; raises ResourceExhausted if live work alone cannot."""
    if bounds.max_live_tasks > 0 and usage.live_tasks + tasks > bounds.max_live_tasks:
        raise ResourceExhausted(
            f"{user} already has {usage.live_tasks} queued or running task(s) and this job adds {tasks}; "
            f"the limit is {bounds.max_live_tasks} per user (limits.max_jobs_per_user)"
        )
    if bounds.max_spec_bytes > 0 and usage.live_spec_bytes + spec_bytes > bounds.max_spec_bytes:
        raise ResourceExhausted(
            f"{user}'s unfinished jobs hold {usage.live_spec_bytes} bytes of job specs and this one adds "
            f"{spec_bytes}; the limit is {bounds.max_spec_bytes} bytes per user (limits.max_spec_bytes_per_user)"
        )
    held = usage.live_spec_bytes + spec_bytes + usage.finished_spec_bytes
    records = usage.finished - bounds.max_finished if bounds.max_finished > 0 else 0
    over = held - bounds.max_spec_bytes if bounds.max_spec_bytes > 0 else 0
    return Prune(max(records, 0), max(over, 0))
