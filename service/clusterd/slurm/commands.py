"""The default backend: Slurm's own commands with JSON output (works on any Slurm >= 21.08)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import TypeVar

from clusterd import accounts
from clusterd.accounts import UnixAccount
from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError, SlurmUnavailable, says_unavailable
from clusterd.slurm import argv, parse
from clusterd.slurm.accounting import ACCOUNTING_DISABLED, parse_sacct
from clusterd.slurm.request import JobRequest
from clusterd.slurm.runner import CommandRunner
from clusterd.slurm.topology_text import parse_topology
from clusterd.slurm.types import JobPoll, SlurmJob, SlurmNode, SlurmSwitch
from clusterd.slurm.version import SlurmVersion, SlurmVersionError

T = TypeVar("T")
log = logging.getLogger(__name__)


class CommandsBackend:
    name = "commands"  # the backend label on metrics and log lines

    def __init__(self, config: SlurmConfig, runner: CommandRunner | None = None) -> None:
        self.runner = runner or CommandRunner(
            bin_dir=config.bin_dir, slurm_conf=config.slurm_conf, timeout=config.command_timeout_seconds
        )
        self._job_path = config.job_path
        self._nodes_command: list[str] | None = None  # see _nodes_argv
        self._partial_queue: bool | None = None  # see poll_jobs

    async def submit(self, request: JobRequest) -> str:
        """sbatch runs as the job's user, in its submit directory, with a minimal environment.

        Whatever sbatch reads or asks for then happens with the caller's rights: a job_submit
        plugin sees the caller, and root-only options fail as they would for the caller.
        """
        run_as = await asyncio.to_thread(resolve_run_as, request.user)
        env = self._user_env(request.user, run_as)
        result = await self.runner.run(
            argv.sbatch_argv(request),
            stdin=request.script,
            env=env,
            run_as=run_as,
            cwd=request.submit_directory or None,
        )
        try:
            return argv.parse_sbatch_parsable(result.stdout)
        except ValueError as exc:
            raise SlurmError("sbatch", result.returncode, str(exc)) from exc

    async def cancel(self, job_id: str) -> None:
        await self.runner.run(argv.scancel_argv(job_id))

    async def requeue(self, job_id: str) -> None:
        await self.runner.run(argv.requeue_argv(job_id))

    async def steps_on(self, job_id: str, on_nodes: tuple[str, ...]) -> tuple[str, ...]:
        listed = await self._steps(job_id)
        chosen = []
        for step, nodes in listed:
            try:
                expanded = parse.expand_nodes(nodes)
            except ValueError as exc:  # a hostlist squeue printed that cannot be expanded
                raise SlurmError("squeue --steps", 0, f"step {step}: node list {nodes!r}: {exc}") from exc
            if set(on_nodes) & set(expanded):
                chosen.append(step)
        if listed and not chosen:  # Slurm's node lists do not name them: every step ends, none waits forever
            log.warning("job %s: no step lists a task on %s; killing all its steps", job_id, ",".join(on_nodes))
            return tuple(step for step, _ in listed)
        return tuple(chosen)

    async def kill_steps(self, job_id: str, steps: tuple[str, ...] | None = None) -> None:
        chosen = [s for s, _ in await self._steps(job_id)] if steps is None else list(steps)
        if chosen:
            await self.runner.run(argv.kill_step_argv(chosen), check=False)  # a step that just ended is fine

    async def _steps(self, job_id: str) -> list[tuple[str, str]]:
        """The job's running steps with squeue's hostlist of each: ``123.0``, a het component's
        ``123+1.0``, an array task's ``7_3.0`` (never the batch shell's or extern's)."""
        listed = await self.runner.run(argv.steps_argv(job_id))
        steps = []
        for line in listed.stdout.splitlines():
            step, _, nodes = line.strip().partition(" ")
            owner, _, number = step.rpartition(".")
            if owner and number.isdigit():
                steps.append((step, nodes.strip()))
        return steps

    async def set_node_down(self, node: str, reason: str) -> None:
        await self.runner.run(argv.node_down_argv(node, reason))

    async def drain_node(self, node: str, reason: str) -> None:
        await self.runner.run(argv.node_drain_argv(node, reason))

    async def update_job(
        self, job_id: str, *, exclude_nodes: tuple[str, ...] | None = None, start_after: int | None = None
    ) -> None:
        await self.runner.run(argv.update_job_argv(job_id, exclude_nodes=exclude_nodes, start_after=start_after))

    async def list_jobs(self) -> list[SlurmJob]:
        result = await self.runner.run(argv.SQUEUE_ARGV)
        return await _parsed("squeue", parse.parse_squeue, result.stdout)

    async def poll_jobs(self, focus: frozenset[str]) -> JobPoll:
        """Two filtered squeues (jobs not PENDING; the focus) from 24.11 on, the whole queue before."""
        if not await self.filters_queue():
            return JobPoll(tuple(await self.list_jobs()))
        result = await self.runner.run(argv.SQUEUE_NOT_PENDING_ARGV)
        jobs = await _parsed("squeue", parse.parse_squeue, result.stdout)
        if any(i.isdigit() for i in focus):
            result = await self.runner.run(argv.squeue_jobs_argv(focus))
            jobs += await _parsed("squeue", parse.parse_squeue, result.stdout)
        return JobPoll(tuple(jobs), whole=False)

    async def queue_states(self) -> str:
        """Every job's id and state, one per line (releases where ``filters_queue``): a cheap sign of
        whether anything started, ended or moved since the last time (10,000 jobs: ~30 ms of squeue
        and ~4 ms of slurmctld, vs ~55 ms and ~25 ms for one filtered squeue)."""
        return (await self.runner.run(argv.SQUEUE_STATES_ARGV)).stdout

    async def filters_queue(self) -> bool:
        """Whether squeue --json honours its filters here; decided once, like _nodes_argv."""
        if self._partial_queue is None:
            self._partial_queue = await self._release() >= argv.PARTIAL_QUEUE_FROM
        return self._partial_queue

    async def _release(self) -> tuple[int, int]:
        """Slurm's release from ``sbatch --version``; (0, 0) when unreadable (the oldest behaviour)."""
        try:
            return SlurmVersion.parse(await self.version()).release
        except SlurmVersionError:
            return (0, 0)

    async def list_nodes(self) -> list[SlurmNode]:
        nodes_argv = await self._nodes_argv()
        result = await self.runner.run(nodes_argv)
        return await _parsed(nodes_argv[0], parse.parse_sinfo, result.stdout)

    async def _nodes_argv(self) -> list[str]:
        """``scontrol show nodes --json`` where the release has it (node addresses, slurmd ports), else sinfo.

        Decided once from ``sbatch --version``; a version we cannot read keeps sinfo, which works everywhere.
        """
        if self._nodes_command is None:
            release = await self._release()
            self._nodes_command = argv.NODES_JSON_ARGV if release >= argv.NODES_JSON_FROM else argv.SINFO_ARGV
        return self._nodes_command

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

    async def hold(self, job_id: str, *, user: str) -> None:
        await self._run_as(user, argv.hold_argv(job_id))

    async def release(self, job_id: str, *, user: str) -> None:
        await self._run_as(user, argv.release_argv(job_id))

    async def _run_as(self, user: str, command: list[str]) -> None:
        """Run a job command with ``user``'s rights: Slurm, not clusterd, decides what the user may do
        (run by root, ``scontrol release`` would lift an administrator's hold too)."""
        run_as = await asyncio.to_thread(resolve_run_as, user, command[0])
        await self.runner.run(command, env=self._user_env(user, run_as), run_as=run_as)

    def _user_env(self, user: str, run_as: UnixAccount | None) -> dict[str, str]:
        """The whole environment of a command run for ``user``: identity and PATH, nothing of clusterd's."""
        return {
            "HOME": run_as.home if run_as else "/",
            "USER": user,
            "LOGNAME": user,
            "PATH": self._job_path or os.environ.get("PATH", "/usr/bin:/bin"),
        }

    async def mark_supervised(self, job_id: str, comment: str) -> None:
        await self.runner.run(argv.supervise_argv(job_id, comment))

    async def set_admin_comment(self, job_id: str, note: str) -> None:
        await self.runner.run(argv.admin_comment_argv(job_id, note))

    async def accounting_jobs(self, *, since: float, until: float, user: str | None) -> list[SlurmJob] | None:
        result = await self.runner.run(argv.sacct_argv(since=since, until=until, user=user), check=False)
        if result.returncode != 0:
            said = f"{result.stdout}\n{result.stderr}"
            if ACCOUNTING_DISABLED in said:
                return None
            if says_unavailable(said):
                raise SlurmUnavailable("sacct", result.returncode, said)
            raise SlurmError("sacct", result.returncode, said)
        return await _parsed("sacct", parse_sacct, result.stdout)


async def _parsed(command: str, parser: Callable[[str], list[T]], text: str) -> list[T]:
    """Parse in a worker thread: a big queue's JSON takes tens of ms that the event loop needs."""
    try:
        return await asyncio.to_thread(parser, text)
    except parse.SlurmReportedErrors as exc:  # e.g. squeue exits 0 but could not reach slurmctld
        raise SlurmUnavailable(command, 0, str(exc)) from exc
    except ValueError as exc:
        raise SlurmError(command, 0, str(exc)) from exc


def resolve_run_as(user: str, command: str = "sbatch") -> UnixAccount | None:
    """The identity to run ``command`` with: the user's, when clusterd is root (else clusterd's own).

    Blocking on a miss (clusterd.accounts): call it in a worker thread.
    """
    if os.geteuid() != 0:
        return None
    try:
        return accounts.lookup(user)
    except KeyError:
        raise SlurmError(command, None, f"user {user!r} has no Unix account on this host") from None
