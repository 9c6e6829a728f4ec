"""Node failures from the store: the restarts clusterd recorded for dead nodes, read back.

Every node death clusterd acts on is persisted (a NODE_FAILURE restart entry naming the nodes and
when they failed) before it is noted anywhere in memory, so the store alone rebuilds what a
service knew of them: a restarted or newly leading clusterd advises from the failures it saw
before, not from the prior again. Only clusterd's own decisions count, never a job's claims.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from clusterd.goodput.autopilot import FailureHistory
from clusterd.model.causes import Cause
from clusterd.store.jobs import JobRecords
from clusterd.store.records import RestartEntry


@dataclass(frozen=True)
class NodeFailure:
    """Nodes that died together, and when they failed (before clusterd detected it)."""

    nodes: tuple[str, ...]
    when: float


def failure_of(entry: RestartEntry) -> NodeFailure | None:
    """The node failure a restart entry records; None for any other cause (a tenant's crash or hang
    must not change the advice other tenants get) or when it names no node."""
    if entry.cause != Cause.NODE_FAILURE or not entry.failed_nodes:
        return None
    return NodeFailure(entry.failed_nodes, entry.phases.get("failed", entry.time))


async def node_failures(jobs: JobRecords, since: float) -> list[NodeFailure]:
    """The node failures clusterd decided on since ``since`` (by decision time), oldest first."""
    found = (failure_of(e) for _, _, _, e in await jobs.restarts_since(since, Cause.NODE_FAILURE))
    return [f for f in found if f is not None]


async def restore(
    history: FailureHistory,
    jobs: JobRecords,
    *,
    complete_seconds: float,
    clock: Callable[[], float] = time.time,
) -> int:
    """Note in ``history`` the failures the store holds within its window; returns how many entries.

    The store keeps every record for ``complete_seconds`` after it finished (the retention age; 0:
    forever), so restarts older than that may be gone with their records: both the failures read
    and the time watched reach back no further, or a week of failures would be divided by a month
    watched (a long-held job keeps the oldest record old). A user's records pruned past their count
    take their failures with them: a restart then undercounts, never overcounts, the time watched.
    Idempotent: an entry already noted (live, or by an earlier restore) is the same failure again.
    """
    now = clock()
    complete = now - complete_seconds if complete_seconds > 0 else float("-inf")
    failures = await node_failures(jobs, max(now - history.window_seconds, complete))
    for failure in failures:
        history.note(failure.nodes, failure.when, known_boot=False)
    first = await jobs.first_created()
    if first is not None:
        history.watched_since(max(first, complete))
    return len(failures)
