"""The seam between clusterd and Slurm.

Every backend (Slurm's own commands, slurmrestd, pyslurm, the in-memory fake for unit tests)
implements :class:`SlurmBackend`. Callers never see Slurm's strings or JSON shapes, only the types
in :mod:`clusterd.slurm.types`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from clusterd.slurm.request import JobRequest
from clusterd.slurm.types import SlurmJob, SlurmNode, SlurmSwitch


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

    async def kill_steps(self, job_id: str) -> None:
        """SIGKILL every running step of a job, not its batch shell.

        The steps end at once and srun, still alive, collects their exits; killing the batch shell
        first would leave each step's slurmstepd retrying to reach a dead srun for seconds, and the
        job COMPLETING (unable to start again) meanwhile.
        """
        ...

    async def set_node_down(self, node: str, reason: str) -> None:
        """Mark a node DOWN with a reason: Slurm stops and requeues (``--requeue``) its jobs at once."""
        ...

    async def update_job(
        self, job_id: str, *, exclude_nodes: tuple[str, ...] | None = None, start_after: int | None = None
    ) -> None:
        """Change a pending job: its excluded nodes, and/or its BeginTime (0 = now, N = in N seconds)."""
        ...

    async def list_jobs(self) -> list[SlurmJob]:
        """The whole queue in ONE query (the queue cache is the only caller)."""
        ...

    async def list_nodes(self) -> list[SlurmNode]: ...

    async def topology(self) -> list[SlurmSwitch]:
        """The switch tree; empty when no topology plugin is configured."""
        ...

    async def partitions(self) -> list[str]: ...

    async def version(self) -> str: ...
