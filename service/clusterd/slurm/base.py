"""The seam between clusterd and Slurm.

Every backend (Slurm's own commands, slurmrestd, pyslurm, the in-memory fake for unit tests)
implements :class:`SlurmBackend`. Callers never see Slurm's strings or JSON shapes, only the types
in :mod:`clusterd.slurm.types`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from clusterd.slurm.request import JobRequest
from clusterd.slurm.types import JobPoll, SlurmJob, SlurmNode, SlurmSwitch


@runtime_checkable
class SlurmBackend(Protocol):
    async def submit(self, request: JobRequest) -> str:
        """Submit one batch job, as ``request.user``, and return its Slurm job id.

        Raises:
            SlurmError: sbatch refused the job (its message is passed on).
            SlurmUnavailable: slurmctld did not answer in time.
        """
        ...

    async def cancel(self, job_id: str) -> None: ...

    async def requeue(self, job_id: str) -> None:
        """Put a running or finished job back to PENDING under the same job id."""
        ...

    async def steps_on(self, job_id: str, on_nodes: tuple[str, ...]) -> tuple[str, ...]:
        """The job's running steps with a task on one of ``on_nodes``; all its steps (logged) when
        none lists one, so a relaunch never leaves the failed step running for its srun to wait on.
        Called before the nodes are marked down: Slurm may take them out of the steps' node lists."""
        ...

    async def kill_steps(self, job_id: str, steps: tuple[str, ...] | None = None) -> None:
        """SIGKILL ``steps`` of a job (None: every running step), not its batch shell.

        The steps end at once and srun, still alive, collects their exits; killing the batch shell
        first would leave each step's slurmstepd retrying to reach a dead srun for seconds, and the
        job COMPLETING (unable to start again) meanwhile. A job relaunched in place loses only the
        steps on its failed nodes (:meth:`steps_on`): the others (its memory tiers on the survivors)
        keep running.
        """
        ...

    async def set_node_down(self, node: str, reason: str) -> None:
        """Mark a node DOWN with a reason: Slurm stops and requeues (``--requeue``) its jobs at once."""
        ...

    async def drain_node(self, node: str, reason: str) -> None:
        """DRAIN a node with a reason: no new work lands there; the jobs running there are left alone."""
        ...

    async def update_job(
        self, job_id: str, *, exclude_nodes: tuple[str, ...] | None = None, start_after: int | None = None
    ) -> None:
        """Change a pending job: its excluded nodes, and/or its BeginTime (0 = now, N = in N seconds)."""
        ...

    async def list_jobs(self) -> list[SlurmJob]:
        """The whole queue in ONE query (the queue cache is the only caller)."""
        ...

    async def poll_jobs(self, focus: frozenset[str]) -> JobPoll:
        """What can have changed since the last look: every job not PENDING plus the jobs (or arrays)
        ``focus`` names, in any state, where the release can filter; else the whole queue.

        On a big cluster the queue is mostly other users' pending jobs that change rarely: a partial
        look skips them and the queue cache re-reads the whole queue now and then.
        """
        ...

    async def list_nodes(self) -> list[SlurmNode]: ...

    async def topology(self) -> list[SlurmSwitch]:
        """The switch tree; empty when no topology plugin is configured."""
        ...

    async def partitions(self) -> list[str]: ...

    async def version(self) -> str: ...

    async def hold(self, job_id: str, *, user: str) -> None:
        """Hold a pending job as a user hold (``scontrol uhold``), with ``user``'s rights."""
        ...

    async def release(self, job_id: str, *, user: str) -> None:
        """Release a held job with ``user``'s rights: Slurm refuses to lift an administrator's hold."""
        ...

    async def mark_supervised(self, job_id: str, comment: str) -> None:
        """Tag a job submitted without the service with its record's comment and make it requeueable.

        Adoption: the supervisor recognises a job by that comment (JobRecord.adopts) and requeues
        it after failures, which Slurm refuses for a job submitted with ``--no-requeue``.
        """
        ...

    async def set_admin_comment(self, job_id: str, note: str) -> None:
        """Set the job's AdminComment: a note from the service that only an administrator can write
        and the job itself can read (``scontrol show job``), e.g. where a relaunched step runs."""
        ...

    async def accounting_jobs(self, *, since: float, until: float, user: str | None) -> list[SlurmJob] | None:
        """Jobs Slurm accounting (slurmdbd) knows that ended in [since, until), of ``user`` (None: all).

        Returns None when the cluster keeps no accounting (``AccountingStorageType=none``).
        Raises SlurmError / SlurmUnavailable like the other reads.
        """
        ...
