"""The default backend: Slurm's own commands with JSON output (works on any Slurm >= 21.08)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError, SlurmUnavailable
from clusterd.slurm import argv, parse
from clusterd.slurm.runner import CommandRunner
from clusterd.slurm.types import SlurmJob, SlurmNode, SlurmSwitch, SubmitArgs
from clusterd.topology.parse import parse_topology

T = TypeVar("T")


class CommandsBackend:
    name = "commands"  # the backend label on metrics and log lines

    def __init__(self, config: SlurmConfig, runner: CommandRunner | None = None) -> None:
        self.runner = runner or CommandRunner(
            bin_dir=config.bin_dir, slurm_conf=config.slurm_conf, timeout=config.command_timeout_seconds
        )

    async def submit(self, args: SubmitArgs) -> str:
        result = await self.runner.run(argv.sbatch_argv(args), stdin=args.script, env=args.environment)
        try:
            return argv.parse_sbatch_parsable(result.stdout)
        except ValueError as exc:
            raise SlurmError("sbatch", result.returncode, str(exc)) from exc

    async def cancel(self, job_id: str) -> None:
        await self.runner.run(argv.scancel_argv(job_id))

    async def requeue(self, job_id: str) -> None:
        await self.runner.run(argv.requeue_argv(job_id))

    async def update_job(
        self, job_id: str, *, exclude_nodes: tuple[str, ...] | None = None, start_after: int | None = None
    ) -> None:
        await self.runner.run(argv.update_job_argv(job_id, exclude_nodes=exclude_nodes, start_after=start_after))

    async def list_jobs(self) -> list[SlurmJob]:
        result = await self.runner.run(argv.SQUEUE_ARGV)
        return await _parsed("squeue", parse.parse_squeue, result.stdout)

    async def list_nodes(self) -> list[SlurmNode]:
        result = await self.runner.run(argv.SINFO_ARGV)
        return await _parsed("sinfo", parse.parse_sinfo, result.stdout)

    async def topology(self) -> list[SlurmSwitch]:
        result = await self.runner.run(argv.TOPOLOGY_ARGV, check=False)
        if result.returncode != 0:
            return []  # no topology plugin configured: one flat network
        return parse_topology(result.stdout)

    async def partitions(self) -> list[str]:
        result = await self.runner.run(argv.PARTITIONS_ARGV)
        return parse.parse_partitions(result.stdout)

    async def version(self) -> str:
        result = await self.runner.run(argv.VERSION_ARGV)
        return parse.parse_version(result.stdout)


async def _parsed(command: str, parser: Callable[[str], list[T]], text: str) -> list[T]:
    """Parse in a worker thread: a big queue's JSON takes tens of ms that the event loop needs."""
    try:
        return await asyncio.to_thread(parser, text)
    except parse.SlurmReportedErrors as exc:  # e.g. squeue exits 0 but could not reach slurmctld
        raise SlurmUnavailable(command, 0, str(exc)) from exc
    except ValueError as exc:
        raise SlurmError(command, 0, str(exc)) from exc
