"""``list --all``: the whole queue as squeue shows it to every user, from the one queue poll.

squeue shows everyone every job's id, partition, name, user, state, time and nodes or reason
(unless slurm.conf sets PrivateData=jobs, which clusterd reads at start; ``views.public_queue =
false`` hides them too). Rows
are built from those fields and nothing else, so no other user's script, environment, paths,
restarts or checkpoints can reach the caller through this view.
"""

from __future__ import annotations

from dataclasses import dataclass

from clusterd.auth.identity import Identity
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.supervisor.cache import ClusterSnapshot


@dataclass(frozen=True)
class QueueRow:
    job_id: str  # squeue's JOBID: 14, 14_3, 14_[4-9]
    partition: str
    name: str
    user: str
    state: JobState
    reason: str
    nodes: tuple[str, ...]
    submit_time: float | None
    start_time: float | None
    end_time: float | None  # finished jobs only (a running job's is Slurm's forecast)
    mine: bool
    supervised: bool


def _key(job: SlurmJob) -> tuple[int, int, str]:
    head = job.array_job_id or job.job_id
    task = job.array_task_id + 1 if job.array_task_id is not None else 0
    return (int(head) if head.isdigit() else 0, task, job.display_id)


def queue_rows(
    snapshot: ClusterSnapshot,
    ident: Identity,
    *,
    public: bool,
    supervised: frozenset[str] = frozenset(),
    partition: str = "",
    states: frozenset[JobState] = frozenset(),
) -> list[QueueRow]:
    """squeue's rows in job id order; only the caller's own unless ``public`` (or an admin).

    ``supervised``: the caller's job ids the service supervises (array ids name all their tasks).
    """
    rows = []
    for job in sorted(snapshot.jobs.values(), key=_key):
        mine = job.user == ident.user
        if not (mine or public or ident.admin):
            continue
        if partition and job.partition != partition:
            continue
        if job.state not in states if states else job.state.terminal:
            continue  # as squeue: finished jobs only when asked for by state (history has them)
        pending = job.state == JobState.PENDING
        rows.append(
            QueueRow(
                job_id=job.display_id,
                partition=job.partition,
                name=job.name,
                user=job.user,
                state=job.state,
                reason=job.reason if pending else "",
                nodes=() if pending else job.nodes,
                submit_time=job.submit_time,
                start_time=job.start_time,
                end_time=job.end_time if job.state.terminal else None,
                mine=mine,
                supervised=mine and (job.array_job_id or job.job_id) in supervised,
            )
        )
    return rows
