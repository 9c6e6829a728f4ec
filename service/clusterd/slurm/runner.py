"""The one place that runs Slurm commands: exec (never a shell), a deadline, captured output."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass

from clusterd.accounts import UnixAccount
from clusterd.errors import SlurmError, SlurmUnavailable, says_unavailable
from clusterd.observability.metrics import observe_slurm_call

log = logging.getLogger(__name__)

_READS = frozenset({"squeue", "sinfo", "scontrol show", "sbatch --version"})


@dataclass
class CommandResult:
    stdout: str
    stderr: str
    returncode: int


@dataclass
class CommandRunner:
    """Runs Slurm binaries with a clean environment; every call is counted in clusterd's metrics."""

    bin_dir: str = ""
    slurm_conf: str = ""
    timeout: float = 30.0

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        if extra:
            env.update(extra)
        return env

    async def run(
        self,
        argv: list[str],
        *,
        stdin: str | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
        run_as: UnixAccount | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        """Run ``argv``; raise SlurmUnavailable on timeout/controller errors, SlurmError on failure."""
        prog = argv[0]
        exe = os.path.join(self.bin_dir, prog) if self.bin_dir else prog
        command = command_label(argv)
        started = time.monotonic()
        outcome = "unavailable"
        result: CommandResult | None = None
        try:
            result = await self._exec(exe, argv, stdin, env, run_as, cwd)
            if check and result.returncode != 0:
                if says_unavailable(result.stderr):
                    raise SlurmUnavailable(prog, result.returncode, result.stderr)
                outcome = "error"
                raise SlurmError(prog, result.returncode, result.stderr)
            outcome = "ok" if result.returncode == 0 else "error"
            return result
        finally:
            seconds = time.monotonic() - started
            observe_slurm_call("commands", command, outcome, seconds)
            # The request id of the RPC that caused this command rides along (see observability.logs).
            quiet = outcome == "ok" and command in _READS  # the poll's reads every interval: debug only
            log.log(
                logging.DEBUG if quiet else logging.INFO,
                "slurm %s %s",
                command,
                outcome,
                extra={
                    "argv": argv,
                    "rc": None if result is None else result.returncode,
                    "duration_ms": round(seconds * 1000, 2),
                    "stderr": None if result is None or outcome == "ok" else result.stderr.strip()[:500],
                    "run_as": None if run_as is None else run_as.name,  # sbatch runs with the caller's rights
                },
            )

    async def _exec(
        self,
        exe: str,
        argv: list[str],
        stdin: str | None,
        env: dict[str, str] | None,
        run_as: UnixAccount | None,
        cwd: str | None,
    ) -> CommandResult:
        prog = argv[0]
        command = [exe, *argv[1:]]
        ids: dict[str, int | list[int] | None] = {"user": None, "group": None, "extra_groups": None}
        if run_as is not None:
            if _SETPRIV:
                command = [_SETPRIV, *setpriv_args(run_as), "--", *command]
            else:
                ids = {"user": run_as.uid, "group": run_as.gid, "extra_groups": list(run_as.groups)}
        try:
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env(env),
                cwd=cwd,
                **ids,  # type: ignore[arg-type]
            )
        except FileNotFoundError as exc:
            raise SlurmUnavailable(prog, None, f"{exe}: not found") from exc
        except PermissionError as exc:  # cwd not reachable for the user
            raise SlurmError(prog, None, f"cannot start {prog} as the job's user: {exc}") from exc
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None), self.timeout
            )
        except TimeoutError as exc:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise SlurmUnavailable(prog, None, f"no answer within {self.timeout:.0f}s") from exc
        return CommandResult(out.decode(errors="replace"), err.decode(errors="replace"), proc.returncode or 0)


# Changing identity through setpriv keeps Python's vfork path: with user=/group= Python must fork(),
# and in a process with gRPC's threads and fork handlers the child can crash before exec (SIGSEGV).
_SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin") or ""


def setpriv_args(run_as: UnixAccount) -> list[str]:
    """The caller's uid, gid and supplementary groups, exactly (no lookups in the child)."""
    groups = ["--groups=" + ",".join(map(str, run_as.groups))] if run_as.groups else ["--clear-groups"]
    return [f"--reuid={run_as.uid}", f"--regid={run_as.gid}", *groups]


def command_label(argv: list[str]) -> str:
    """``scontrol update jobid=1 ...`` -> ``scontrol update``: a metric label with few values.

    ``--version`` is kept apart so that ``sbatch`` counts submissions only.
    """
    if argv[0] == "scontrol" and len(argv) > 1:
        return f"scontrol {argv[1]}"
    if "--version" in argv[1:]:
        return f"{argv[0]} --version"
    return argv[0]
