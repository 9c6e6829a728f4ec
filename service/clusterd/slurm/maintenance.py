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

_ALLOCATE_SECONDS = 30  # srun's wait for the reserved node (slurmctld takes a moment after the resume)
_SLACK_SECONDS = 30.0  # beyond the probe's time limit before srun itself is given up on


class NodeMaintenance(Protocol):
    async def reserve(self, name: str, node: str, user: str, seconds: float) -> None: ...

    async def unreserve(self, name: str) -> None: ...

    async def resume(self, node: str) -> None: ...

    async def drain(self, node: str, reason: str) -> None: ...

    async def run_on(self, node: str, reservation: str, command: tuple[str, ...], seconds: float) -> CommandResult:
        """``command`` on ``node`` inside ``reservation``, ended by Slurm after ``seconds``; raises
        SlurmUnavailable when srun itself does not end in time."""
        ...


class CommandsMaintenance:
    """Through Slurm's commands, as clusterd's own user (every backend drains nodes this way)."""

    def __init__(self, runner: CommandRunner) -> None:
        self._runner = runner

    async def reserve(self, name: str, node: str, user: str, seconds: float) -> None:
        await self._runner.run(argv.reservation_argv(name, node, user, _minutes(seconds) + 1))

    async def unreserve(self, name: str) -> None:
        await self._runner.run(argv.reservation_delete_argv(name))

    async def resume(self, node: str) -> None:
        await self._runner.run(argv.node_resume_argv(node))

    async def drain(self, node: str, reason: str) -> None:
        await self._runner.run(argv.node_drain_argv(node, reason))

    async def run_on(self, node: str, reservation: str, command: tuple[str, ...], seconds: float) -> CommandResult:
        runner = dataclasses.replace(self._runner, timeout=seconds + _ALLOCATE_SECONDS + _SLACK_SECONDS)
        probe = argv.node_probe_argv(node, reservation, command, _minutes(seconds), _ALLOCATE_SECONDS)
        return await runner.run(probe, check=False)


def _minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60))
