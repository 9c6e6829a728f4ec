"""Folding an array job's elements in one queue poll into its record's per-task state (pure).

Only tasks Slurm has started are stored (``JobRecord.array_tasks``); the rest of the array's
indices are pending by construction, so a 1000-task array that has not started costs nothing in
the record's compact row. A task Slurm has forgotten (MinJobAge) keeps its last stored state.

A pending task that leaves the pending range without starting was cancelled: Slurm 22.05 drops
``scancel A_T`` of a pending task from the range and lists no element for it. When the pending
range itself ends (``scancel A``), its tasks end with it.
"""

from __future__ import annotations

from dataclasses import replace

from clusterd.model.causes import Cause
from clusterd.slurm.arrays import derive_state, task_indices
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.store.records import ArrayTask, JobRecord


def indices(rec: JobRecord) -> tuple[int, ...]:
    """Every task index of the record's array (empty for a plain job or an unreadable string)."""
    try:
        return task_indices(rec.array) if rec.array else ()
    except ValueError:
        return ()


def all_states(rec: JobRecord) -> list[JobState]:
    """Each task's state, pending for the tasks that have not started yet."""
    known = [t.state for t in rec.array_tasks.values()]
    missing = len(set(indices(rec)) - set(rec.array_tasks))
    return known + [JobState.PENDING] * missing


def observe_array(rec: JobRecord, elements: tuple[SlurmJob, ...]) -> bool:
    """Copy one poll's array elements into the record; True when anything a client sees changed."""
    before = (
        rec.state,
        rec.reason,
        rec.nodes,
        rec.exit_code,
        rec.exit_signal,
        rec.start_time,
        rec.end_time,
        {i: replace(t) for i, t in rec.array_tasks.items()},
    )
    reason, ends = "", [rec.end_time or 0.0]
    waiting: SlurmJob | None = None  # the pending range, when this poll lists one
    for sj in elements:
        rec.name = sj.name or rec.name
        rec.partition = sj.partition or rec.partition
        if sj.array_task_id is None:
            waiting = sj
            reason = sj.reason  # the pending range: why the rest waits
            rec.submit_time = sj.submit_time or rec.submit_time
            continue
        task = rec.array_tasks.get(sj.array_task_id) or ArrayTask()
        task.state = sj.state
        task.exit_code, task.exit_signal = sj.exit_code, sj.exit_signal
        if sj.nodes or sj.state is not JobState.PENDING:
            task.nodes = sj.nodes
        task.slurm_restarts = max(task.slurm_restarts, sj.restart_count)
        rec.array_tasks[sj.array_task_id] = task
        if sj.start_time and (rec.start_time is None or sj.start_time < rec.start_time):
            rec.start_time = sj.start_time
        if sj.state.terminal and sj.end_time:
            ends.append(sj.end_time)
    if waiting is not None:
        _never_started(rec, waiting, {sj.array_task_id for sj in elements if sj.array_task_id is not None})
        if waiting.state.terminal and waiting.end_time:
            ends.append(waiting.end_time)
    derive(rec, reason)
    rec.end_time = (max(ends) or None) if finished(rec) else None
    after = (
        rec.state,
        rec.reason,
        rec.nodes,
        rec.exit_code,
        rec.exit_signal,
        rec.start_time,
        rec.end_time,
        rec.array_tasks,
    )
    return before != after


def _never_started(rec: JobRecord, waiting: SlurmJob, started: set[int | None]) -> None:
    """Tasks that ended without starting: those that left the pending range (``scancel A_T``), and
    the range's own when it ended (``scancel A``; after the last one, 22.05 lists it with no tasks)."""
    ended = waiting.state.terminal
    if waiting.array_pending:
        try:
            pending = set(task_indices(waiting.array_pending))
        except ValueError:
            return
    elif ended:
        pending = set()
    else:
        return  # a live range that names no tasks says nothing about them
    for index in indices(rec):
        task = rec.array_tasks.get(index)
        if index in started or (task is not None and task.state is not JobState.PENDING):
            continue  # running or ended as Slurm showed it (it may have forgotten it since)
        if index in pending and not ended:
            continue
        task = task or ArrayTask()
        whole_range = ended and (index in pending or not waiting.array_pending)
        task.state = waiting.state if whole_range else JobState.CANCELLED
        rec.array_tasks[index] = task


def derive(rec: JobRecord, reason: str = "") -> None:
    """The array's own fields from its tasks: state, nodes in use, the first failed task's exit.

    ``reason`` is why the pending tasks wait (squeue's reason on the pending range's row): kept
    while any task is pending, also when others run.
    """
    rec.state = derive_state(all_states(rec))
    rec.reason = reason if JobState.PENDING in all_states(rec) else ""
    running = [t for _, t in sorted(rec.array_tasks.items()) if t.state is JobState.RUNNING]
    rec.nodes = tuple(dict.fromkeys(n for t in running for n in t.nodes))
    failed = first_failed(rec)
    rec.exit_code, rec.exit_signal = (failed.exit_code, failed.exit_signal) if failed else (0, 0)
    rec.restart_count = sum(t.restarts for t in rec.array_tasks.values())


def first_failed(rec: JobRecord) -> ArrayTask | None:
    """The lowest-numbered task that ended other than COMPLETED (its exit is the array's)."""
    for _, task in sorted(rec.array_tasks.items()):
        if task.state.terminal and task.state is not JobState.COMPLETED:
            return task
    return None


def finished(rec: JobRecord) -> bool:
    """Every task of the array has ended."""
    states = all_states(rec)
    return bool(states) and all(s.terminal for s in states)


_CAUSES = {
    JobState.CANCELLED: Cause.CANCELLED,
    JobState.TIMEOUT: Cause.TIME_LIMIT,
    JobState.OUT_OF_MEMORY: Cause.OUT_OF_MEMORY,
    JobState.NODE_FAIL: Cause.NODE_FAILURE,
    JobState.PREEMPTED: Cause.PREEMPTED,
}


def final_cause(rec: JobRecord) -> Cause:
    """The final cause of a finished array: COMPLETED, or its first failed task's."""
    failed = first_failed(rec)
    if failed is None:
        return Cause.COMPLETED
    return _CAUSES.get(failed.state, Cause.EXIT_CODE)


def end_reason(rec: JobRecord) -> str:
    """``"all 4 tasks completed"`` or ``"1 of 4 tasks failed (first: task 2, exit code 3)"``."""
    total = len(rec.array_tasks)
    bad = [(i, t) for i, t in sorted(rec.array_tasks.items()) if t.state is not JobState.COMPLETED]
    if not bad:
        return f"all {total} tasks completed"
    i, t = bad[0]
    how = f"signal {t.exit_signal}" if t.exit_signal else f"exit code {t.exit_code}"
    return f"{len(bad)} of {total} tasks ended unsuccessfully (first: task {i}, {t.state.value.lower()}, {how})"
