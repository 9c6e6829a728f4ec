"""The pyslurm backend: Slurm's C API through pyslurm (25.x API), for sites where it matches Slurm.

pyslurm is built against ONE Slurm release (its setup refuses any other: "Slurm version mismatch:
requires Slurm 25.11, found ..."), and PyPI only has 25.11, so on Debian's 22.05 it cannot even be
built. :func:`unavailable_reason` says why it cannot be used, in one line, for the factory and the
contract tests. Every pyslurm call blocks in libslurm, so each runs in a worker thread.

Submission: libslurm, unlike sbatch, never reads a script's ``#SBATCH`` lines (and the request's
script has them neutralised): each JobRequest field is rendered into a JobSubmitDescription
attribute here.
pyslurm has no topology call: ``scontrol show topology`` answers that, as in the commands backend.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from clusterd import accounts
from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError, SlurmUnavailable, says_unavailable
from clusterd.observability.metrics import observed_slurm_call
from clusterd.slurm import parse
from clusterd.slurm.request import ExportMode, JobRequest, Sharing
from clusterd.slurm.restd_submit import Unexpressible
from clusterd.slurm.types import JobPoll, SlurmJob, SlurmNode, SlurmSwitch
from clusterd.slurm.version import SlurmVersion, SlurmVersionError

if TYPE_CHECKING:
    from clusterd.slurm.commands import CommandsBackend

log = logging.getLogger(__name__)

T = TypeVar("T")
BACKEND = "pyslurm"
_READS = frozenset({"list jobs", "list nodes", "partitions", "version"})

Attrs = dict[str, Any]
_Render = Callable[[Attrs, JobRequest], None]


def _attr(attr: str, field: str, convert: Callable[[Any], Any] = lambda v: v) -> _Render:
    """Copy a field to a JobSubmitDescription attribute when set (not None, "", () or False)."""

    def render(attrs: Attrs, req: JobRequest) -> None:
        value = getattr(req, field)
        if value not in (None, "", (), False):
            attrs[attr] = convert(value)

    return render


def _none(_attrs: Attrs, _req: JobRequest) -> None:
    return None


def _nodes(attrs: Attrs, req: JobRequest) -> None:
    if req.nodes is not None:
        attrs["nodes"] = f"{req.nodes}-{req.max_nodes}" if req.max_nodes else req.nodes


def _gpus(attr: str, field: str) -> _Render:
    def render(attrs: Attrs, req: JobRequest) -> None:
        count = getattr(req, field)
        if count:
            attrs[attr] = f"{req.gpu_type}:{count}" if req.gpu_type else count

    return render


def _time_limit(attrs: Attrs, req: JobRequest) -> None:
    if req.time_unlimited:
        attrs["time_limit"] = "UNLIMITED"
    elif req.time_limit_seconds is not None:
        attrs["time_limit"] = (req.time_limit_seconds + 59) // 60  # minutes, rounded up as sbatch


def _user(attrs: Attrs, req: JobRequest) -> None:
    """libslurm submits as the calling process unless root names the user (the job runs as them)."""
    if req.user and os.geteuid() == 0:
        try:
            account = accounts.lookup(req.user)
        except KeyError:
            raise SlurmError(f"{BACKEND} submit", None, f"user {req.user!r} has no Unix account here") from None
        attrs["user_id"] = account.uid
        attrs["group_id"] = account.gid


def _environment(attrs: Attrs, req: JobRequest) -> None:
    env = _base_environment() if req.export.mode is ExportMode.ALL else {}
    env["USER"] = req.user
    if req.submit_directory:
        env["SLURM_SUBMIT_DIR"] = req.submit_directory
    attrs["environment"] = env


def _sharing(attrs: Attrs, req: JobRequest) -> None:
    if req.sharing is not None:
        attrs["resource_sharing"] = {Sharing.EXCLUSIVE: "no", Sharing.OVERSUBSCRIBE: "yes"}.get(
            req.sharing, req.sharing.value
        )


def _memory_per_node(attrs: Attrs, req: JobRequest) -> None:
    if req.memory_mb_per_node == 0:  # --mem=0: all of each node's memory
        raise Unexpressible(f"{BACKEND} submit", None, "cannot express --mem=0 through pyslurm")
    if req.memory_mb_per_node is not None:
        attrs["memory_per_node"] = f"{req.memory_mb_per_node}M"


def _signal(attrs: Attrs, req: JobRequest) -> None:
    if req.signal is not None:
        if req.signal.reservation_end:
            raise Unexpressible(f"{BACKEND} submit", None, "cannot express --signal=R:... through pyslurm")
        attrs["signal"] = req.signal.render()


def _by_sbatch(option: str, field: str) -> _Render:
    """A field JobSubmitDescription has no attribute for: the request goes to sbatch instead."""

    def render(_attrs: Attrs, req: JobRequest) -> None:
        if getattr(req, field) not in (None, "", (), False):
            raise Unexpressible(f"{BACKEND} submit", None, f"cannot express {option} through pyslurm")

    return render


# One renderer per JobRequest field (a test pins that none is missing); attribute names from
# pyslurm's JobSubmitDescription.
RENDERERS: dict[str, _Render] = {
    "script": _attr("script", "script"),
    "name": _attr("name", "name"),
    "user": _user,
    "comment": _attr("comment", "comment"),
    "partition": _attr("partition", "partition"),
    "account": _attr("account", "account"),
    "qos": _attr("qos", "qos"),
    "reservation": _attr("reservations", "reservation"),
    "nodes": _nodes,
    "max_nodes": _none,  # with nodes
    "ntasks": _attr("ntasks", "ntasks"),
    "tasks_per_node": _attr("ntasks_per_node", "tasks_per_node"),
    "cpus_per_task": _attr("cpus_per_task", "cpus_per_task"),
    "gpus": _gpus("gpus", "gpus"),
    "gpus_per_node": _gpus("gpus_per_node", "gpus_per_node"),
    "gpu_type": _none,  # with gpus / gpus_per_node
    "memory_mb_per_node": _memory_per_node,
    "memory_mb_per_cpu": _attr("memory_per_cpu", "memory_mb_per_cpu", lambda mb: f"{mb}M"),
    "time_limit_seconds": _time_limit,
    "time_unlimited": _none,  # with time_limit_seconds
    "constraint": _attr("constraints", "constraint"),
    "nodelist": _attr("required_nodes", "nodelist", list),
    "exclude": _attr("excluded_nodes", "exclude", list),
    "switches": _attr("switches", "switches", lambda s: s.render()),
    "working_directory": _attr("working_directory", "working_directory"),
    "submit_directory": _none,  # SLURM_SUBMIT_DIR in the environment
    "stdout": _attr("standard_output", "stdout"),
    "stderr": _attr("standard_error", "stderr"),
    "stdin": _attr("standard_input", "stdin"),
    "array": _attr("array", "array", lambda a: a.render()),
    "dependency": _attr("dependencies", "dependency"),
    "begin": _attr("begin_time", "begin"),
    "hold": lambda attrs, r: attrs.update(priority=0) if r.hold else None,
    "sharing": _sharing,
    "mail_type": _attr("mail_types", "mail_type", list),
    "mail_user": _attr("mail_user", "mail_user"),
    "nice": _attr("nice", "nice"),
    "requeue": lambda attrs, r: attrs.update(is_requeueable=r.requeue),
    "open_append": lambda attrs, r: attrs.update(log_files_open_mode="append" if r.open_append else "truncate"),
    "signal": _signal,
    "export": _environment,
    "gpus_per_task": _gpus("gpus_per_task", "gpus_per_task"),
    "cpus_per_gpu": _attr("cpus_per_gpu", "cpus_per_gpu"),
    "memory_mb_per_gpu": _attr("memory_per_gpu", "memory_mb_per_gpu", lambda mb: f"{mb}M"),
    "tasks_per_gpu": _attr("ntasks_per_gpu", "tasks_per_gpu"),
    "tasks_per_core": _attr("ntasks_per_core", "tasks_per_core"),
    "gpu_bind": _attr("gpu_binding", "gpu_bind"),
    "gres_flags": _attr("gres_binding", "gres_flags"),
    "hint": _by_sbatch("--hint", "hint"),
    "distribution": _attr("distribution", "distribution"),
    "sockets_per_node": _attr("sockets_per_node", "sockets_per_node"),
    "cores_per_socket": _attr("cores_per_socket", "cores_per_socket"),
    "threads_per_core": _attr("threads_per_core", "threads_per_core"),
    "min_cpus_per_node": _attr("min_cpus_per_node", "min_cpus_per_node"),
    "contiguous": _attr("requires_contiguous_nodes", "contiguous"),
    "spread_job": _attr("spreads_over_nodes", "spread_job"),
    "kill_on_invalid_dep": lambda attrs, r: (
        attrs.update(kill_on_invalid_dependency=r.kill_on_invalid_dep) if r.kill_on_invalid_dep is not None else None
    ),
    "deadline": _attr("deadline", "deadline"),
    "time_min_seconds": _attr("time_limit_min", "time_min_seconds", lambda s: (s + 59) // 60),
    "wckey": _attr("wckey", "wckey"),
    "tmp_mb": _attr("temporary_disk_per_node", "tmp_mb", lambda mb: f"{mb}M"),
    "tasks_per_socket": _attr("ntasks_per_socket", "tasks_per_socket"),
    "gpus_per_socket": _gpus("gpus_per_socket", "gpus_per_socket"),
    "delay_boot_seconds": _attr("delay_boot_time", "delay_boot_seconds", lambda s: (s + 59) // 60),
    "overcommit": _attr("overcommit", "overcommit"),
    "no_kill": lambda attrs, r: attrs.update(kill_on_node_fail=False) if r.no_kill else None,
    "use_min_nodes": _attr("use_min_nodes", "use_min_nodes"),
    "wait_all_nodes": lambda attrs, r: (
        attrs.update(wait_all_nodes=r.wait_all_nodes) if r.wait_all_nodes is not None else None
    ),
    "mem_bind": _attr("memory_binding", "mem_bind"),
    "acctg_freq": _attr("accounting_gather_frequency", "acctg_freq"),
    "licenses": _attr("licenses", "licenses"),
    "batch_features": _attr("batch_constraints", "batch_features"),
}


def submit_attributes(req: JobRequest) -> Attrs:
    """JobSubmitDescription keyword arguments for ``req`` (pure but for the passwd lookup of the
    user: call it in a worker thread)."""
    attrs: Attrs = {}
    for render in RENDERERS.values():
        render(attrs, req)
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
        **_array_fields(job),
    )


def _array_fields(job: Any) -> dict[str, Any]:
    """pyslurm's ``array_id``/``array_task_id``/``array_tasks_waiting`` as SlurmJob's array fields."""
    array_id = _int(getattr(job, "array_id", 0))
    if not array_id:
        return {}
    task = getattr(job, "array_task_id", None)
    pending = str(getattr(job, "array_tasks_waiting", "") or "") if task is None else ""
    return {
        "array_job_id": str(array_id),
        "array_task_id": None if task is None else _int(task),
        "array_pending": pending,
    }


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

    async def submit(self, request: JobRequest) -> str:
        """A request JobSubmitDescription cannot carry as sbatch would goes to sbatch, run as the caller."""
        try:
            attrs = await asyncio.to_thread(submit_attributes, request)
        except Unexpressible as exc:
            log.info("submitting with sbatch: %s", exc.detail)
            return await self._commands().submit(request)

        def submit() -> str:
            return str(self._pyslurm.JobSubmitDescription(**attrs).submit())

        return await self._call("submit", submit)

    async def cancel(self, job_id: str) -> None:
        if "_" in job_id:  # one array task: pyslurm's Job takes whole-job ids only
            await self._commands().cancel(job_id)
            return
        await self._call("cancel", lambda: self._pyslurm.Job(int(job_id)).cancel())

    async def requeue(self, job_id: str) -> None:
        if "_" in job_id:
            await self._commands().requeue(job_id)
            return
        await self._call("requeue", lambda: self._pyslurm.Job(int(job_id)).requeue())

    def _commands(self) -> CommandsBackend:
        from clusterd.slurm.commands import CommandsBackend

        return CommandsBackend(self._config)

    async def steps_on(self, job_id: str, on_nodes: tuple[str, ...]) -> tuple[str, ...]:
        return await self._commands().steps_on(job_id, on_nodes)

    async def kill_steps(self, job_id: str, steps: tuple[str, ...] | None = None) -> None:
        await self._commands().kill_steps(job_id, steps)

    async def set_node_down(self, node: str, reason: str) -> None:
        await self._commands().set_node_down(node, reason)

    async def drain_node(self, node: str, reason: str) -> None:
        await self._commands().drain_node(node, reason)

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

    async def poll_jobs(self, focus: frozenset[str]) -> JobPoll:
        """The whole queue, as list_jobs: one load of Slurm's job table."""
        return JobPoll(tuple(await self.list_jobs()))

    async def list_nodes(self) -> list[SlurmNode]:
        def load() -> list[SlurmNode]:
            return [node_from_pyslurm(n) for n in _values(self._pyslurm.Nodes.load())]

        return await self._call("list nodes", load)

    async def topology(self) -> list[SlurmSwitch]:
        return await self._commands().topology()

    # Hold/release/adoption/accounting: Slurm's commands, as for topology (pyslurm's hold runs with
    # root's rights here, an admin hold the user could not release).
    async def hold(self, job_id: str, *, user: str) -> None:
        await self._commands().hold(job_id, user=user)

    async def release(self, job_id: str, *, user: str) -> None:
        await self._commands().release(job_id, user=user)

    async def mark_supervised(self, job_id: str, comment: str) -> None:
        await self._commands().mark_supervised(job_id, comment)

    async def set_admin_comment(self, job_id: str, note: str) -> None:
        await self._commands().set_admin_comment(job_id, note)

    async def accounting_jobs(self, *, since: float, until: float, user: str | None) -> list[SlurmJob] | None:
        return await self._commands().accounting_jobs(since=since, until=until, user=user)

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
