"""JobRequest -> slurmrestd v0.0.38 job description (pure; tested without a server).

slurmctld never reads ``#SBATCH`` lines (sbatch does, client-side), and the request's script has
them neutralised anyway: every option is a JSON field rendered here, one renderer per request
field. Every key below was checked against the v0.0.38 plugin of a running Slurm 22.05
slurmrestd. A value v0.0.38 cannot express is refused with :class:`~clusterd.errors.SlurmError`
before anything is submitted: a silently dropped option would run a different job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from clusterctl.hostlist import compress_hostlist
from clusterd.errors import SlurmError
from clusterd.slurm.request import ExportMode, JobRequest, Sharing

COMMAND = "POST job/submit"

Body = dict[str, Any]
Render = Callable[[Body, JobRequest], None]


class Unexpressible(SlurmError):
    """A request this API version cannot carry as asked, found before sending (nothing reached
    Slurm): RestdBackend submits it with sbatch instead, which can."""


def refuse(option: str, why: str) -> Unexpressible:
    exc = Unexpressible(COMMAND, 0, f"cannot express {option} through slurmrestd: {why}")
    exc.args = (f"{COMMAND} failed (not sent): {exc.detail}",)
    return exc


def minutes(seconds: int) -> int:
    """Slurm keeps time limits in whole minutes, rounding up (as sbatch's time_str2mins)."""
    return (seconds + 59) // 60


def gpu_count(req: JobRequest, count: int | None) -> str:
    return f"{req.gpu_type}:{count}" if req.gpu_type else str(count)


def base_environment(req: JobRequest, base: Mapping[str, str]) -> dict[str, str]:
    """The job's environment as sbatch would send it: sbatch's own (``base``: PATH, locale, the
    user's identity) under ALL, nothing of it under NONE/a list, plus SLURM_SUBMIT_DIR. The
    request's variables travel in the script (clusterd.jobs.script)."""
    env = dict(base) if req.export.mode is ExportMode.ALL else {}
    env["USER"] = req.user
    if req.submit_directory:
        env["SLURM_SUBMIT_DIR"] = req.submit_directory
    return env


def login_environment(req: JobRequest) -> bool:
    """sbatch --export=NONE or a list without ALL implies --get-user-env: slurmd starts the job from
    the user's login environment (HOME, the login PATH) under the named variables."""
    return req.export.mode is not ExportMode.ALL


def _key(key: str, field: str) -> Render:
    """Copy a field to ``key`` when set (not None, "", () or False)."""

    def render(job: Body, req: JobRequest) -> None:
        value = getattr(req, field)
        if value not in (None, "", (), False):
            job[key] = value

    return render


def _none(_job: Body, _req: JobRequest) -> None:
    return None


def _nodes(job: Body, req: JobRequest) -> None:
    if req.nodes is not None:
        job["nodes"] = f"{req.nodes}-{req.max_nodes}" if req.max_nodes else str(req.nodes)


def sbatch_task_count(req: JobRequest) -> int | None:
    """The task count to send so that v0.0.38 holds the job sbatch would; None: send none.

    sbatch derives ``-n`` client-side (its ``_opt_verify``) when it is not given and the node count
    is fixed (``-N``, raised to the ``-w`` nodes; 1 when neither): nodes times
    ``--ntasks-per-node``; else, with ``-N`` or ``-w``, nodes times the ``-B``/``--sockets-per-node``
    ... counts given, or one task per node. The job's CPUs are that count times ``-c``. v0.0.38
    builds the job description without that step, so such a job held one task's CPUs
    (``-N 2 --ntasks-per-node=1 -c 2``: 2 CPUs where sbatch's job holds 4; ``-N 2``: 1 where it
    holds 2). The derived count is sent as ``tasks``; where sbatch sends no count (one task per
    node), the job Slurm holds is still the same as sbatch's on 22.05.
    """
    if req.ntasks is not None:
        return req.ntasks
    nodes = req.nodes
    if req.nodelist:  # -w: at least its nodes, as -N
        nodes = max(len(set(req.nodelist)), nodes or 0)
    if req.max_nodes is not None and req.max_nodes != nodes:
        return None  # a node range: sbatch derives nothing
    if req.tasks_per_node:
        return (1 if nodes is None else nodes) * req.tasks_per_node
    if nodes is None:
        return None
    layout = [n for n in (req.sockets_per_node, req.cores_per_socket, req.threads_per_core) if n is not None]
    count = max(nodes, 1)
    for n in layout:
        count *= n
    return count


def _tasks(job: Body, req: JobRequest) -> None:
    count = sbatch_task_count(req)
    if count is not None:
        job["tasks"] = count


def _time(job: Body, req: JobRequest) -> None:
    if req.time_unlimited:
        job["time_limit"] = "UNLIMITED"
    elif req.time_limit_seconds is not None:
        job["time_limit"] = str(minutes(req.time_limit_seconds))


def _signal(job: Body, req: JobRequest) -> None:
    """``SIG@T`` to the job's steps. v0.0.38 advertises ``B:`` but its parser answers "Invalid
    SIGNAL specification": a batch-shell signal is refused here (sbatch sends it instead)."""
    if req.signal is not None:
        if req.signal.reservation_end:
            raise refuse(f"--signal={req.signal.render()}", "the R: flag was not verified on v0.0.38")
        if req.signal.batch_only:
            raise refuse(f"--signal={req.signal.render()}", "v0.0.38 refuses B: (Invalid SIGNAL specification)")
        job["signal"] = f"{req.signal.name}@{req.signal.seconds}"


def _switches(_job: Body, req: JobRequest) -> None:
    """v0.0.38 disables required_switches ('Disabled key'): RestdBackend sets them after submit."""


def _hosts(key: str, field: str) -> Render:
    def render(job: Body, req: JobRequest) -> None:
        hosts = getattr(req, field)
        if hosts:
            job[key] = compress_hostlist(hosts)

    return render


def _sharing(job: Body, req: JobRequest) -> None:
    """v0.0.38 reads ``exclusive`` as sbatch's argument ("exclusive", "user", "mcs"; "true" is
    "Invalid exclusive specification") and ``oversubscribe`` as a boolean."""
    if req.sharing is Sharing.OVERSUBSCRIBE:
        job["oversubscribe"] = True
    elif req.sharing is not None:
        job["exclusive"] = req.sharing.value


def _by_sbatch(option: str, field: str, why: str) -> Render:
    """A field v0.0.38 does not carry as sbatch does: the request goes to sbatch (run as the caller)."""

    def render(_job: Body, req: JobRequest) -> None:
        if getattr(req, field) not in (None, "", (), False):
            raise refuse(option, why)

    return render


_UNVERIFIED = "its v0.0.38 key was not verified against a running slurmrestd"


def _memory_per_node(job: Body, req: JobRequest) -> None:
    """``--mem``; 0 (all of each node's memory) is sent as sbatch sends it: by sbatch."""
    if req.memory_mb_per_node == 0:
        raise refuse("--mem=0", "whether v0.0.38 reads 0 as sbatch does was not verified")
    if req.memory_mb_per_node is not None:
        job["memory_per_node"] = req.memory_mb_per_node


# One renderer per JobRequest field (a test pins that none is missing).
RENDERERS: dict[str, Render] = {
    "script": _none,  # the body's top-level "script"
    "name": _key("name", "name"),
    "user": _none,  # the token is signed for the user (RestdBackend)
    "comment": _key("comment", "comment"),
    "partition": _key("partition", "partition"),
    "account": _key("account", "account"),
    "qos": _key("qos", "qos"),
    "reservation": _key("reservation", "reservation"),
    "nodes": _nodes,
    "max_nodes": _none,  # with nodes
    "ntasks": _tasks,
    "tasks_per_node": _key("tasks_per_node", "tasks_per_node"),
    "cpus_per_task": _key("cpus_per_task", "cpus_per_task"),
    "gpus": lambda job, r: job.update(gpus=gpu_count(r, r.gpus)) if r.gpus else None,
    "gpus_per_node": lambda job, r: (
        job.update(gres=f"gpu:{gpu_count(r, r.gpus_per_node)}") if r.gpus_per_node else None
    ),
    "gpu_type": _none,  # with gpus / gpus_per_node
    "memory_mb_per_node": _memory_per_node,
    "memory_mb_per_cpu": _key("memory_per_cpu", "memory_mb_per_cpu"),
    "time_limit_seconds": _time,
    "time_unlimited": _none,  # with time_limit_seconds
    "constraint": _key("constraints", "constraint"),
    "nodelist": _hosts("nodelist", "nodelist"),
    "exclude": _hosts("exclude_nodes", "exclude"),
    "switches": _switches,
    "working_directory": _key("current_working_directory", "working_directory"),
    "submit_directory": _none,  # SLURM_SUBMIT_DIR in the environment (base_environment)
    "stdout": _key("standard_output", "stdout"),
    "stderr": _key("standard_error", "stderr"),
    "stdin": _key("standard_input", "stdin"),
    "array": lambda job, r: job.update(array=r.array.render()) if r.array else None,
    "dependency": _key("dependency", "dependency"),
    "begin": _key("begin_time", "begin"),
    "hold": _key("hold", "hold"),
    "sharing": _sharing,
    "mail_type": lambda job, r: job.update(mail_type=",".join(r.mail_type)) if r.mail_type else None,
    "mail_user": _key("mail_user", "mail_user"),
    "nice": _key("nice", "nice"),
    # v0.0.38 reads these as sbatch's flags: "requeue": false is ignored (the job stays requeueable),
    # "no_requeue": true is --no-requeue (checked against 22.05's slurmrestd).
    "requeue": lambda job, r: job.update(requeue=True) if r.requeue else job.update(no_requeue=True),
    "open_append": lambda job, r: job.update(open_mode="append" if r.open_append else "truncate"),
    "signal": _signal,
    # --get-user-env's argument as a string ("": no timeout, as the implied option has); the schema
    # says boolean, but 22.05 refuses true ("Invalid get user environment specification").
    "export": lambda job, r: job.update(get_user_environment="") if login_environment(r) else None,
    "gpus_per_task": lambda job, r: (
        job.update(gpus_per_task=gpu_count(r, r.gpus_per_task)) if r.gpus_per_task else None
    ),
    "cpus_per_gpu": _key("cpus_per_gpu", "cpus_per_gpu"),
    "memory_mb_per_gpu": _key("memory_per_gpu", "memory_mb_per_gpu"),
    "tasks_per_gpu": _key("ntasks_per_tres", "tasks_per_gpu"),
    "tasks_per_core": _key("tasks_per_core", "tasks_per_core"),
    "gpu_bind": _key("gpu_binding", "gpu_bind"),
    "gres_flags": _key("gres_flags", "gres_flags"),
    # sbatch turns --hint into threads per core and a CPU binding on its side; v0.0.38's
    # cpu_binding_hint leaves the job without them.
    "hint": _by_sbatch("--hint", "hint", "v0.0.38's cpu_binding_hint does not set what sbatch's --hint sets"),
    "distribution": _by_sbatch("--distribution", "distribution", "v0.0.38's distribution was not verified"),
    "sockets_per_node": _key("sockets_per_node", "sockets_per_node"),
    "cores_per_socket": _key("cores_per_socket", "cores_per_socket"),
    "threads_per_core": _key("threads_per_core", "threads_per_core"),
    "min_cpus_per_node": _key("minimum_cpus_per_node", "min_cpus_per_node"),
    "contiguous": _by_sbatch("--contiguous", "contiguous", 'v0.0.38 disables the key ("Disabled key")'),
    "spread_job": _key("spread_job", "spread_job"),
    "kill_on_invalid_dep": lambda job, r: (
        job.update(kill_on_invalid_dependency=r.kill_on_invalid_dep) if r.kill_on_invalid_dep is not None else None
    ),
    "deadline": _key("deadline", "deadline"),
    "time_min_seconds": lambda job, r: (
        job.update(time_minimum=minutes(r.time_min_seconds)) if r.time_min_seconds else None
    ),
    "wckey": _by_sbatch("--wckey", "wckey", "v0.0.38's wckey was not verified"),
    "tmp_mb": _by_sbatch("--tmp", "tmp_mb", _UNVERIFIED),
    "tasks_per_socket": _by_sbatch("--ntasks-per-socket", "tasks_per_socket", _UNVERIFIED),
    "gpus_per_socket": lambda job, r: (
        job.update(gpus_per_socket=gpu_count(r, r.gpus_per_socket)) if r.gpus_per_socket else None
    ),
    "delay_boot_seconds": lambda job, r: (
        job.update(delay_boot=minutes(r.delay_boot_seconds)) if r.delay_boot_seconds else None
    ),
    "overcommit": _by_sbatch("--overcommit", "overcommit", _UNVERIFIED),
    "no_kill": _by_sbatch("--no-kill", "no_kill", _UNVERIFIED),
    "use_min_nodes": _by_sbatch("--use-min-nodes", "use_min_nodes", _UNVERIFIED),
    "wait_all_nodes": _by_sbatch("--wait-all-nodes", "wait_all_nodes", _UNVERIFIED),
    "mem_bind": _by_sbatch("--mem-bind", "mem_bind", _UNVERIFIED),
    "acctg_freq": _by_sbatch("--acctg-freq", "acctg_freq", _UNVERIFIED),
    "licenses": _by_sbatch("--licenses", "licenses", _UNVERIFIED),
    "batch_features": _by_sbatch("--batch", "batch_features", _UNVERIFIED),
}


def job_description(req: JobRequest, base: Mapping[str, str]) -> Body:
    """The ``POST /slurm/v0.0.38/job/submit`` body for ``req``."""
    job: Body = {}
    for render in RENDERERS.values():
        render(job, req)
    job["environment"] = base_environment(req, base)
    return {"script": req.script, "job": job}
