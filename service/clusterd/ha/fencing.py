"""The Slurm backend the supervisor acts through: every change to Slurm is fenced by the lease epoch.

A leader frozen between deciding and acting (SIGSTOP, swap, a stalled store) must not requeue,
release, exclude or cancel anything once another replica has taken over: the new leader has
already made its own decision about the same job, and doing both is a double requeue. So each
write re-reads the lease right before it is made (:meth:`Leadership.check`) and raises Deposed
when this replica no longer holds it. Reads pass straight through: they change nothing.
"""

from __future__ import annotations

from clusterd.ha.leadership import Leadership
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.maintenance import NodeMaintenance
from clusterd.slurm.request import JobRequest
from clusterd.slurm.runner import CommandResult
from clusterd.slurm.types import JobPoll, SlurmJob, SlurmNode, SlurmSwitch


class FencedBackend:
    """A :class:`SlurmBackend` whose writes happen only while ``leadership`` holds the lease."""

    def __init__(self, backend: SlurmBackend, leadership: Leadership) -> None:
        self._backend = backend
        self._leadership = leadership
        self.name = getattr(backend, "name", type(backend).__name__)

    async def submit(self, request: JobRequest) -> str:
        await self._leadership.check()
        return await self._backend.submit(request)

    async def cancel(self, job_id: str) -> None:
        await self._leadership.check()
        await self._backend.cancel(job_id)

    async def requeue(self, job_id: str) -> None:
        await self._leadership.check()
        await self._backend.requeue(job_id)

    async def steps_on(self, job_id: str, on_nodes: tuple[str, ...]) -> tuple[str, ...]:
        return await self._backend.steps_on(job_id, on_nodes)

    async def kill_steps(self, job_id: str, steps: tuple[str, ...] | None = None) -> None:
        await self._leadership.check()
        await self._backend.kill_steps(job_id, steps)

    async def set_node_down(self, node: str, reason: str) -> None:
        await self._leadership.check()
        await self._backend.set_node_down(node, reason)

    async def drain_node(self, node: str, reason: str) -> None:
        await self._leadership.check()
        await self._backend.drain_node(node, reason)

    async def update_job(
        self, job_id: str, *, exclude_nodes: tuple[str, ...] | None = None, start_after: int | None = None
    ) -> None:
        await self._leadership.check()
        await self._backend.update_job(job_id, exclude_nodes=exclude_nodes, start_after=start_after)

    async def hold(self, job_id: str, *, user: str) -> None:
        await self._leadership.check()
        await self._backend.hold(job_id, user=user)

    async def release(self, job_id: str, *, user: str) -> None:
        await self._leadership.check()
        await self._backend.release(job_id, user=user)

    async def mark_supervised(self, job_id: str, comment: str) -> None:
        await self._leadership.check()
        await self._backend.mark_supervised(job_id, comment)

    async def set_admin_comment(self, job_id: str, note: str) -> None:
        await self._leadership.check()
        await self._backend.set_admin_comment(job_id, note)

    async def list_jobs(self) -> list[SlurmJob]:
        return await self._backend.list_jobs()

    async def poll_jobs(self, focus: frozenset[str]) -> JobPoll:
        return await self._backend.poll_jobs(focus)

    async def list_nodes(self) -> list[SlurmNode]:
        return await self._backend.list_nodes()

    async def topology(self) -> list[SlurmSwitch]:
        return await self._backend.topology()

    async def partitions(self) -> list[str]:
        return await self._backend.partitions()

    async def version(self) -> str:
        return await self._backend.version()

    async def accounting_jobs(self, *, since: float, until: float, user: str | None) -> list[SlurmJob] | None:
        return await self._backend.accounting_jobs(since=since, until=until, user=user)


class FencedMaintenance:
    """A :class:`NodeMaintenance` whose every step happens only while ``leadership`` holds the lease."""

    def __init__(self, maintenance: NodeMaintenance, leadership: Leadership) -> None:
        self._maintenance = maintenance
        self._leadership = leadership

    async def reserve(self, name: str, node: str, user: str, seconds: float) -> None:
        await self._leadership.check()
        await self._maintenance.reserve(name, node, user, seconds)

    async def unreserve(self, name: str) -> None:
        await self._leadership.check()
        await self._maintenance.unreserve(name)

    async def extend(self, name: str, minutes: int) -> None:
        await self._leadership.check()
        await self._maintenance.extend(name, minutes)

    async def reservations(self, prefix: str) -> dict[str, str]:
        return await self._maintenance.reservations(prefix)  # a read: any replica may

    async def resume(self, node: str) -> None:
        await self._leadership.check()
        await self._maintenance.resume(node)

    async def drain(self, node: str, reason: str) -> None:
        await self._leadership.check()
        await self._maintenance.drain(node, reason)

    async def run_on(
        self, node: SlurmNode, reservation: str, command: tuple[str, ...], seconds: float
    ) -> CommandResult:
        await self._leadership.check()
        return await self._maintenance.run_on(node, reservation, command, seconds)
