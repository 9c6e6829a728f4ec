"""Job arrays as Slurm shows them: task ids, pending task strings, the array's overall state (pure).

squeue shows an array as one record per started task plus one record for the tasks not started
yet (``14_[4-9%2]``); an array's state is derived from its tasks' states the way a user reads
squeue: running while any task runs, completed only when every task completed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from clusterd.slurm.types import JobState

_TASK_ID_RE = re.compile(r"([0-9]{1,20})_([0-9]{1,7})\Z")
_RANGE_RE = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?\Z")
_MAX_EXPAND = 4_000_000  # Slurm's MaxArraySize ceiling: a task string never names more


def split_task_id(text: str) -> tuple[str, int | None]:
    """``"14_3"`` -> ("14", 3); ``"14"`` -> ("14", None). Raises ValueError for anything else."""
    if text.isdigit() and len(text) <= 20:
        return text, None
    m = _TASK_ID_RE.match(text)
    if not m:
        raise ValueError(f"{text[:40]!r} is not a Slurm job id (N or N_TASK)")
    return m.group(1), int(m.group(2))


def task_indices(text: str) -> tuple[int, ...]:
    """Indices in a task string: ``"4-9%2"``, ``"1,3,5"``, ``"0-15:4"`` (``%N`` ignored)."""
    body = text.strip().strip("[]").partition("%")[0]
    out: set[int] = set()
    for part in body.split(","):
        if not part:
            continue
        m = _RANGE_RE.match(part)
        if not m:
            raise ValueError(f"cannot read array task string {text[:40]!r}")
        start = int(m.group(1))
        stop = int(m.group(2)) if m.group(2) is not None else start
        step = int(m.group(3)) if m.group(3) is not None else 1
        if stop < start or step <= 0 or stop >= _MAX_EXPAND:
            raise ValueError(f"bad range {part!r} in array task string {text[:40]!r}")
        out.update(range(start, stop + 1, step))
    return tuple(sorted(out))


def compress(indices: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``: squeue's way of writing a set of task ids."""
    parts: list[str] = []
    start = prev = None
    for i in sorted(indices):
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


_ACTIVE = (JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED)
# Which ended state an array with mixed outcomes shows: a failure beats a cancel beats success.
_END_ORDER = (
    JobState.NODE_FAIL,
    JobState.BOOT_FAIL,
    JobState.OUT_OF_MEMORY,
    JobState.FAILED,
    JobState.TIMEOUT,
    JobState.DEADLINE,
    JobState.PREEMPTED,
    JobState.CANCELLED,
    JobState.UNKNOWN,
    JobState.COMPLETED,
)


def derive_state(states: Iterable[JobState]) -> JobState:
    """The array's state: RUNNING while any task runs, PENDING while any waits, else its worst end.

    COMPLETED only when every task completed; FAILED (or the harsher end) if any task failed.
    """
    seen = list(states)
    if not seen:
        return JobState.PENDING
    for active in _ACTIVE:
        if active in seen:
            return JobState.RUNNING if active is JobState.COMPLETING else active
    if any(not s.terminal for s in seen):
        return JobState.PENDING
    for state in _END_ORDER:
        if state in seen:
            return state
    return JobState.UNKNOWN
