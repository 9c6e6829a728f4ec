"""Whether leaving a straggler node out (restarting its job without it) pays: the decision alone.

A synchronous job runs at its slowest node's pace. With a straggler whose step time is ``ratio``
times the others', the job does in its ``remaining`` time what it would do in remaining/ratio
without it: the straggler costs ``remaining * (1 - 1/ratio)``. A restart costs what the job's own
earlier restarts measured (from the failure to the next run's first step, their median), plus the
work since its newest checkpoint, which is done again. Evict when the straggler costs more.

No time limit, or no restart of the job measured yet: no eviction (it is never made on a guess).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from clusterd.slurm.request import parse_time_limit
from clusterd.store.records import RestartEntry


def measured_restart_seconds(restarts: Sequence[RestartEntry]) -> float | None:
    """The median recovery of the job's restarts that reached their first step (None: none did)."""
    took = [
        r.phases["first_step"] - r.phases["failed"]
        for r in restarts
        if "first_step" in r.phases and "failed" in r.phases and r.phases["first_step"] >= r.phases["failed"]
    ]
    return statistics.median(took) if took else None


def remaining_seconds(time_limit: str, started: float | None, now: float) -> float | None:
    """What is left of the run's time limit (None: no limit known, or not started)."""
    if not time_limit or started is None:
        return None
    try:
        limit = parse_time_limit(time_limit)
    except ValueError:
        return None
    return None if limit is None else max(0.0, started + limit - now)


def straggler_seconds(ratio: float, remaining: float) -> float:
    """The work the job loses over ``remaining`` by running at the straggler's pace."""
    return remaining * (1 - 1 / ratio) if ratio > 1 else 0.0


def worth_evicting(ratio: float, remaining: float | None, restart: float | None, redo: float) -> str:
    """Why the straggler should be left out, or "" when it should not (or that cannot be known)."""
    if remaining is None or restart is None:
        return ""
    cost = straggler_seconds(ratio, remaining)
    if cost <= restart + redo:
        return ""
    return (
        f"it would cost {cost:.0f}s over the {remaining:.0f}s left (at {ratio:.2f}x), "
        f"a restart {restart + redo:.0f}s ({restart:.0f}s measured + {redo:.0f}s since the newest checkpoint)"
    )
