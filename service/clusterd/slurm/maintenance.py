"""What the health probe (liveness.repair) does to a drained node through Slurm, and nothing else.

A drained node takes no job, so the probe reserves the node for clusterd's own user (a MAINT
reservation), resumes it (the reservation keeps every other user off it), runs the operator's
command there with srun inside the reservation, and ends the reservation: after a passing probe the
node is then in service, after a failing one it is drained again first.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Protocol

from clusterd.slurm import argv
from clusterd.slurm.runner import CommandResult, CommandRunner
from clusterd.slurm.types import SlurmNode

_ALLOCATE_SECONDS = 30  # srun's wait for the reserved node (slurmctld takes a moment after the resume)
_SLACK_SECONDS = 30.0  # beyond the probe's time limit before srun itself is given up on
_MARGIN_SECONDS = 60.0  # the reservation outlasts the drain after a failed probe by this much at least


class NodeMaintenance(Protocol):
    async def reserve(self, name: str, node: str, user: str, seconds: float) -> None:
        """Reserve ``node`` for a probe of ``seconds``: long enough for the resume, the probe's srun
        and the drain after it, each given up on at its own time limit."""
        ...

    async def unreserve(self, name: str) -> None: ...

    async def extend(self, name: str, minutes: int) -> None:
        """``name`` to end ``minutes`` from now (a drain still to be done needs it)."""
        ...

    async def reservations(self, prefix: str) -> dict[str, str]:
        """The reservations named ``prefix``...: name -> its nodes (as Slurm writes them)."""
        ...

    async def resume(self, node: str) -> None: ...

    async def drain(self, node: str, reason: str) -> None: ...

    async def run_on(
        self, node: SlurmNode, reservation: str, command: tuple[str, ...], seconds: float
    ) -> CommandResult:
        """``command`` on ``node`` (the whole of it, in one of its partitions) inside ``reservation``,
        ended by Slurm after ``seconds``; raises SlurmUnavailable when srun itself does not end in time."""
        ...


class CommandsMaintenance:
    """Through Slurm's commands, as clusterd's own user (every backend drains nodes this way)."""

    def __init__(self, runner: CommandRunner) -> None:
        self._runner = runner

    async def reserve(self, name: str, node: str, user: str, seconds: float) -> None:
        minutes = reservation_minutes(seconds, self._runner.timeout)
        await self._runner.run(argv.reservation_argv(name, node, user, minutes))

    async def unreserve(self, name: str) -> None:
        await self._runner.run(argv.reservation_delete_argv(name))

    async def extend(self, name: str, minutes: int) -> None:
        await self._runner.run(argv.reservation_extend_argv(name, minutes))

    async def reservations(self, prefix: str) -> dict[str, str]:
        out = (await self._runner.run(argv.RESERVATIONS_ARGV)).stdout
        found = {}
        for line in out.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            name = fields.get("ReservationName", "")
            if name.startswith(prefix):
                found[name] = fields.get("Nodes", "")
        return found

    async def resume(self, node: str) -> None:
        await self._runner.run(argv.node_resume_argv(node))

    async def drain(self, node: str, reason: str) -> None:
        await self._runner.run(argv.node_drain_argv(node, reason))

    async def run_on(
        self, node: SlurmNode, reservation: str, command: tuple[str, ...], seconds: float
    ) -> CommandResult:
        runner = dataclasses.replace(self._runner, timeout=seconds + _ALLOCATE_SECONDS + _SLACK_SECONDS)
        partition = node.partitions[0] if node.partitions else ""
        probe = argv.node_probe_argv(
            node.name,
            reservation,
            command,
            _minutes(seconds),
            _ALLOCATE_SECONDS,
            partition=partition,
            gpus=node.gpus_total,
        )
        return await runner.run(probe, check=False)


def reservation_minutes(seconds: float, command_timeout: float) -> int:
    """How long a probe's reservation lasts, counted from its creation: the resume (one command),
    srun (the probe's ``seconds``, the wait for the node, the slack before srun is given up on) and
    the drain after a failed probe (one command), with a margin. Shorter, and a node whose probe did
    not finish would be back with every user before clusterd drains it again."""
    total = 2 * command_timeout + seconds + _ALLOCATE_SECONDS + _SLACK_SECONDS + _MARGIN_SECONDS
    return _minutes(total)


def _minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60))
