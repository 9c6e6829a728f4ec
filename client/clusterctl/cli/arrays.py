"""Array jobs on screen, as squeue shows them (pure: JobStatus messages in, messages/tables out).

The service keeps one record per array with every task in ``JobStatus.tasks``. ``list`` shows
it the way ``squeue`` does: the tasks not started yet collapsed into one row (``14_[4-9]``) and
one row per started task (``14_3``); ``list --array`` gives every task its own row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from clusterctl.digits import is_digits
from clusterctl.v1 import jobs_pb2


def split_id(job_id: str) -> tuple[str, int | None]:
    """``"14_3"`` -> ("14", 3); anything else -> (job_id, None)."""
    head, sep, task = job_id.partition("_")
    if sep and is_digits(head) and is_digits(task):
        return head, int(task)
    return job_id, None


def compress(indices: Iterable[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5,9"``, squeue's way of writing task ranges."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(indices):
        if run and i != run[-1] + 1:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(i)
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def task_view(job: jobs_pb2.JobStatus, task_id: int) -> jobs_pb2.JobStatus:
    """One task of an array as its own status (what ``status 14_3`` shows), from the array's."""
    view = jobs_pb2.JobStatus()
    view.CopyFrom(job)
    task = next((t for t in job.tasks if t.task_id == task_id), jobs_pb2.ArrayTask(task_id=task_id))
    view.job_id = f"{job.job_id}_{task_id}"
    view.state, view.exit_code, view.exit_signal = task.state, task.exit_code, task.exit_signal
    view.has_exit_code, view.restart_count = task.has_exit_code, task.restart_count
    view.nodes[:] = list(task.nodes)
    view.terminal = job.terminal or task.has_exit_code
    if task.state != jobs_pb2.JOB_STATE_PENDING:
        view.reason = ""
    if not job.terminal:
        view.final_reason = ""
    del view.tasks[:]
    view.tasks.append(task)
    return view


def _pending_row(job: jobs_pb2.JobStatus, indices: list[int]) -> jobs_pb2.JobStatus:
    row = jobs_pb2.JobStatus()
    row.CopyFrom(job)
    row.job_id = f"{job.job_id}_[{compress(indices)}]"
    row.state, row.exit_code, row.exit_signal, row.has_exit_code = jobs_pb2.JOB_STATE_PENDING, 0, 0, False
    row.terminal, row.final_reason, row.restart_count = False, "", 0
    del row.nodes[:]
    del row.tasks[:]
    return row


def rows(jobs: Iterable[jobs_pb2.JobStatus], *, expand: bool = False) -> Iterator[jobs_pb2.JobStatus]:
    """``list``'s rows: plain jobs as they are; arrays collapsed like squeue, or one row per task."""
    for job in jobs:
        if not job.tasks:
            yield job
            continue
        pending = [t.task_id for t in job.tasks if t.state == jobs_pb2.JOB_STATE_PENDING and not t.restart_count]
        if pending and not expand:
            yield _pending_row(job, pending)
        for task in job.tasks:
            if expand or task.task_id not in pending:
                yield task_view(job, task.task_id)
