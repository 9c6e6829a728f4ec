"""The pyslurm backend: Slurm's C API through pyslurm (25.x API), for sites where it matches Slurm.

pyslurm is built against ONE Slurm release (its setup refuses any other: "Slurm version mismatch:
requires Slurm 25.11, found ..."), and PyPI only has 25.11, so on Debian's 22.05 it cannot even be
built. :func:`unavailable_reason` says why it cannot be used, in one line, for the factory and the
contract tests. Every pyslurm call blocks in libslurm, so each runs in a worker thread.

Submission: libslurm, unlike sbatch, never reads a script's ``#SBATCH`` lines, so the header is
turned into JobSubmitDescription attributes here (the service's own options override it, as on
sbatch's command line). An option without an equivalent is refused before anything is submitted.
pyslurm has no topology call: ``scontrol show topology`` answers that, as in the commands backend.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, TypeVar

from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError, SlurmUnavailable, says_unavailable
from clusterd.jobs.script import ScriptError, parse_directives
from clusterd.observability.metrics import observed_slurm_call
from clusterd.slurm import parse
from clusterd.slurm.types import SlurmJob, SlurmNode, SlurmSwitch, SubmitArgs
from clusterd.slurm.version import SlurmVersion, SlurmVersionError

log = logging.getLogger(__name__)

T = TypeVar("T")
BACKEND = "pyslurm"
_READS = frozenset({"list jobs", "list nodes", "partitions", "version"})

# sbatch long option -> pyslurm.JobSubmitDescription attribute (names from pyslurm's #SBATCH table).
_VALUE_OPTIONS: dict[str, str] = {
    "account": "account",
    "array": "array",
    "begin": "begin_time",
    "chdir": "working_directory",
    "comment": "comment",
    "constraint": "constraints",
    "cpus-per-gpu": "cpus_per_gpu",
    "cpus-per-task": "cpus_per_task",
    "deadline": "deadline",
    "dependency": "dependencies",
    "error": "standard_error",
    "exclude": "excluded_nodes",
    "gpus": "gpus",
    "gpus-per-node": "gpus_per_node",
    "gpus-per-task": "gpus_per_task",
    "gres": "gres_per_node",
    "input": "standard_input",
    "job-name": "name",
    "licenses": "licenses",
    "mail-type": "mail_types",
    "mail-user": "mail_user",
    "mem": "memory_per_node",
    "mem-per-cpu": "memory_per_cpu",
    "mem-per-gpu": "memory_per_gpu",
    "nice": "nice",
    "nodelist": "required_nodes",
    "nodes": "nodes",
    "ntasks": "ntasks",
    "ntasks-per-node": "ntasks_per_node",
    "open-mode": "log_files_open_mode",
    "output": "standard_output",
    "partition": "partition",
    "qos": "qos",
    "reservation": "reservations",
    "signal": "signal",
    "switches": "switches",
    "time": "time_limit",
    "time-min": "time_limit_min",
    "wckey": "wckey",
}
# Flags (no value) -> (attribute, value).
_FLAG_OPTIONS: dict[str, tuple[str, Any]] = {
    "requeue": ("is_requeueable", True),
    "no-requeue": ("is_requeueable", False),
    "contiguous": ("requires_contiguous_nodes", True),
    "exclusive": ("resource_sharing", "no"),
    "oversubscribe": ("resource_sharing", "yes"),
    "hold": ("priority", 0),
    "spread-job": ("spreads_over_nodes", True),
    "use-min-nodes": ("use_min_nodes", True),
}
# Handled from SubmitArgs fields, or harmless for a library call.
_SKIPPED_OPTIONS = frozenset({"parsable", "uid", "gid"})


def _refuse(option: str, why: str) -> SlurmError:
    return SlurmError(f"{BACKEND} submit", None, f"--{option}: {why}")


def _split_options(options: Iterable[str]) -> list[tuple[str, str | None]]:
    """``("--job-name=x", "--requeue")`` -> ``[("job-name", "x"), ("requeue", None)]``."""
    out: list[tuple[str, str | None]] = []
    for token in options:
        if not token.startswith("--"):
            raise SlurmError(f"{BACKEND} submit", None, f"option {token!r}: only --name[=value] options are supported")
        name, eq, value = token[2:].partition("=")
        out.append((name, value if eq else None))
    return out


def submit_attributes(args: SubmitArgs, base_environment: Mapping[str, str] | None = None) -> dict[str, Any]:
    """JobSubmitDescription keyword arguments for ``args``: ``#SBATCH`` header, then the options on top.

    Pure, so the translation is tested without pyslurm. Raises SlurmError naming an option that has
    no pyslurm equivalent (a silently dropped option would run a different job).
    """
    try:
        directives = [(k, v or None) for k, v in parse_directives(args.script).items()]
    except ScriptError as exc:
        raise SlurmError(f"{BACKEND} submit", None, f"script: {exc}") from exc
    attrs: dict[str, Any] = {}
    for name, value in [*directives, *_split_options(args.options)]:
        if name in _SKIPPED_OPTIONS:
            continue
        if name in _FLAG_OPTIONS:
            if value not in (None, ""):
                raise _refuse(name, f"takes no value, got {value!r}")
            attr, flag_value = _FLAG_OPTIONS[name]
            attrs[attr] = flag_value
        elif name in _VALUE_OPTIONS:
            if value is None:
                raise _refuse(name, "needs a value")
            attrs[_VALUE_OPTIONS[name]] = value
        else:
            raise _refuse(name, "has no pyslurm JobSubmitDescription equivalent; use slurm.backend=commands")
    env = dict(base_environment if base_environment is not None else _base_environment())
    env.update(args.environment)
    attrs["script"] = args.script
    attrs["environment"] = env
    if args.uid is not None:
        attrs["user_id"] = args.uid
    if args.gid is not None:
        attrs["group_id"] = args.gid
    if args.working_directory:
        attrs["working_directory"] = args.working_directory
    return attrs


def _base_environment() -> dict[str, str]:
    """What sbatch would export from the commands backend's clean environment."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _time(value: Any) -> float | None:
    n = _int(value)
    return float(n) if n > 0 else None


def job_from_pyslurm(job: Any) -> SlurmJob:
    """A ``pyslurm.Job`` -> SlurmJob. pyslurm already splits exit code and signal and gives seconds."""
    return SlurmJob(
        job_id=str(job.id),
        name=str(getattr(job, "name", "") or ""),
        user=str(getattr(job, "user_name", "") or ""),
        state=parse.job_state(getattr(job, "state", None)),
        reason=parse.reason_text(getattr(job, "state_reason", "")),
        nodes=parse.expand_nodes(getattr(job, "allocated_nodes", None)),
        partition=str(getattr(job, "partition", "") or ""),
        exit_code=_int(getattr(job, "exit_code", 0)),
        exit_signal=_int(getattr(job, "exit_code_signal", 0)),
        submit_time=_time(getattr(job, "submit_time", None)),
        start_time=_time(getattr(job, "start_time", None)),
        end_time=_time(getattr(job, "end_time", None)),
        restart_count=_int(getattr(job, "requeue_count", 0)),
        excluded_nodes=parse.expand_nodes(getattr(job, "excluded_nodes", None)),
        requeue=bool(getattr(job, "is_requeueable", False)),
        comment=str(getattr(job, "comment", "") or ""),
        batch_host=str(getattr(job, "batch_host", "") or ""),
    )


def _gres_gpus(gres: Any) -> int:
    """pyslurm gives GRES as a dict (``{"gpu": 4}``, ``{"gpu:a100": {"count": 2, ...}}``) or a string."""
    if isinstance(gres, Mapping):
        total = 0
        for key, value in gres.items():
            if str(key).split(":", 1)[0] != "gpu":
                continue
            if isinstance(value, Mapping):
                total += _int(value.get("count"))
            else:
                total += _int(str(value).split("(", 1)[0])
        return total
    return parse.gres_gpus(str(gres or ""))


def node_from_pyslurm(node: Any) -> SlurmNode:
    """A ``pyslurm.Node`` -> SlurmNode; its state is Slurm's complete string, e.g. ``IDLE+DRAIN``."""
    base, *flags = [s for s in str(getattr(node, "state", "") or "UNKNOWN").rstrip("*$~#%!").split("+") if s]
    features = getattr(node, "active_features", None) or getattr(node, "available_features", None) or []
    return SlurmNode(
        name=str(node.name),
        state=parse.node_state(base, flags),
        cpus_total=_int(getattr(node, "total_cpus", 0)),
        cpus_allocated=_int(getattr(node, "allocated_cpus", 0)),
        gpus_total=_gres_gpus(getattr(node, "configured_gres", None)),
        gpus_allocated=_gres_gpus(getattr(node, "allocated_gres", None)),
        memory_mb_total=_int(getattr(node, "real_memory", 0)),
        memory_mb_allocated=_int(getattr(node, "allocated_memory", 0)),
        partitions=tuple(str(p) for p in getattr(node, "partitions", None) or ()),
        features=tuple(str(f) for f in features),
        reason=str(getattr(node, "reason", "") or ""),
        flags=tuple(flags),
    )


def _values(collection: Any) -> list[Any]:
    """pyslurm collections are dict-like (cluster-keyed in 25.x); iterate their values."""
    values = collection.values() if hasattr(collection, "values") else collection
    return list(values)


def pyslurm_release(module: ModuleType) -> SlurmVersion:
    """The Slurm release a pyslurm build targets: pyslurm versions ARE Slurm versions (25.11.x)."""
    for getter in ("slurm_version", "version"):
        fn = getattr(module, getter, None)
        if callable(fn):
            try:
                value = fn()
            except Exception:  # an API call that needs a running slurmctld: try the next one
                continue
            text = ".".join(str(v) for v in value) if isinstance(value, tuple) else str(value)
            try:
                return SlurmVersion.parse(text)
            except SlurmVersionError:
                continue
    return SlurmVersion.parse(str(getattr(module, "__version__", "")))


def running_slurm_version(config: SlurmConfig | None = None, timeout: float = 10.0) -> SlurmVersion:
    """``sbatch --version`` of the cluster, synchronously (the factory decides at startup)."""
    config = config or SlurmConfig()
    exe = os.path.join(config.bin_dir, "sbatch") if config.bin_dir else "sbatch"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    if config.slurm_conf:
        env["SLURM_CONF"] = config.slurm_conf
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=timeout, env=env, check=True)
    return SlurmVersion.parse(out.stdout)


def unavailable_reason(slurm_version: str | None = None, config: SlurmConfig | None = None) -> str | None:
    """None when pyslurm imports AND targets the running Slurm's release; else a one-line reason.

    ``slurm_version`` (e.g. ``"22.05.8"``) skips asking ``sbatch --version``.
    """
    try:
        module = importlib.import_module("pyslurm")
    except Exception as exc:  # ImportError, or libslurm failing to load/initialise
        return f"pyslurm is not importable: {type(exc).__name__}: {exc}".splitlines()[0]
    try:
        built_for = pyslurm_release(module)
    except SlurmVersionError as exc:
        return f"pyslurm is importable but its Slurm version is unknown: {exc}"
    try:
        running = SlurmVersion.parse(slurm_version) if slurm_version else running_slurm_version(config)
    except (OSError, subprocess.SubprocessError, SlurmVersionError) as exc:
        return f"cannot read the running Slurm's version (sbatch --version): {exc}".splitlines()[0]
    if not built_for.same_release(running):
        return (
            f"pyslurm {built_for} is built for Slurm {built_for.major}.{built_for.minor:02d} "
            f"but this cluster runs {running}"
        )
    return None


class PyslurmBackend:
    """SlurmBackend over pyslurm; build it only where :func:`unavailable_reason` is None."""

    name = BACKEND

    def __init__(self, config: SlurmConfig, module: ModuleType | None = None) -> None:
        self._config = config
        self._pyslurm = module or importlib.import_module("pyslurm")

    async def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run a blocking pyslurm call in a thread; counted and logged like every call into Slurm."""
        with observed_slurm_call(BACKEND, what, read=what in _READS):
            try:
                return await asyncio.to_thread(fn)
            except SlurmError:
                raise
            except Exception as exc:
                rpc_error = getattr(self._pyslurm, "RPCError", None)
                is_rpc_error = isinstance(rpc_error, type) and isinstance(exc, rpc_error)
                if is_rpc_error or isinstance(exc, ValueError | OSError):
                    message = str(exc) or type(exc).__name__
                    if says_unavailable(message):
                        raise SlurmUnavailable(f"{BACKEND} {what}", None, message) from exc
                    raise SlurmError(f"{BACKEND} {what}", None, message) from exc
                raise

    async def submit(self, args: SubmitArgs) -> str:
        attrs = submit_attributes(args)

        def submit() -> str:
            return str(self._pyslurm.JobSubmitDescription(**attrs).submit())

        return await self._call("submit", submit)

    async def cancel(self, job_id: str) -> None:
        await self._call("cancel", lambda: self._pyslurm.Job(int(job_id)).cancel())

    async def requeue(self, job_id: str) -> None:
        await self._call("requeue", lambda: self._pyslurm.Job(int(job_id)).requeue())

    async def update_job(
        self, job_id: str, *, exclude_nodes: tuple[str, ...] | None = None, start_after: int | None = None
    ) -> None:
        changes: dict[str, Any] = {}
        if exclude_nodes is not None:
            changes["excluded_nodes"] = ",".join(exclude_nodes)
        if start_after is not None:
            changes["begin_time"] = int(time.time()) + max(int(start_after), 0)  # unix seconds
        if not changes:
            return

        def modify() -> None:
            self._pyslurm.Job(int(job_id)).modify(self._pyslurm.JobSubmitDescription(**changes))

        await self._call("update", modify)

    async def list_jobs(self) -> list[SlurmJob]:
        def load() -> list[SlurmJob]:
            return [job_from_pyslurm(j) for j in _values(self._pyslurm.Jobs.load())]

        return await self._call("list jobs", load)

    async def list_nodes(self) -> list[SlurmNode]:
        def load() -> list[SlurmNode]:
            return [node_from_pyslurm(n) for n in _values(self._pyslurm.Nodes.load())]

        return await self._call("list nodes", load)

    async def topology(self) -> list[SlurmSwitch]:
        from clusterd.slurm.commands import CommandsBackend

        return await CommandsBackend(self._config).topology()

    async def partitions(self) -> list[str]:
        def load() -> list[str]:
            return [str(getattr(p, "name", p)) for p in _values(self._pyslurm.Partitions.load())]

        return await self._call("partitions", load)

    async def version(self) -> str:
        """The running Slurm's ``sbatch --version``; pyslurm's target release if that fails."""
        try:
            return str(await asyncio.to_thread(running_slurm_version, self._config))
        except (OSError, subprocess.SubprocessError, SlurmVersionError):
            return str(await self._call("version", lambda: pyslurm_release(self._pyslurm)))
