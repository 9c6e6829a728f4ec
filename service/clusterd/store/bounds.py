"""What one user may hold in the store, and the decision a submission's reservation makes with it.

Pure logic, no SQL: the store reads a user's usage and finished records inside the reservation's
transaction and calls :func:`admit`, so concurrent submissions cannot all pass one count.
Finished records are history, expendable oldest first; live ones are the user's work, never
dropped: when live work alone passes a bound the submission is refused, naming the limit.
"""

from __future__ import annotations

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
    live_tasks: int
    live_spec_bytes: int
    finished: tuple[tuple[int, int], ...]  # (record_id, spec_bytes) of finished records, oldest first


def admit(bounds: UserBounds, usage: Usage, *, user: str, tasks: int, spec_bytes: int) -> list[int]:
    """The finished records to prune so the new submission fits; raises ResourceExhausted if it cannot."""
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
    prune: list[int] = []
    finished = list(usage.finished)
    held = usage.live_spec_bytes + spec_bytes + sum(size for _, size in finished)
    keep = bounds.max_finished if bounds.max_finished > 0 else len(finished)
    while finished and (len(finished) > keep or (bounds.max_spec_bytes > 0 and held > bounds.max_spec_bytes)):
        record_id, size = finished.pop(0)
        prune.append(record_id)
        held -= size
    return prune
