"""Pure argv builders for Slurm's commands: the build step of build -> run -> parse."""

from __future__ import annotations

import time
from collections.abc import Callable

from clusterctl.hostlist import compress_hostlist
from clusterd.slurm.request import ExportMode, JobRequest, Sharing, slurm_time

_Render = Callable[[JobRequest], list[str]]


def _opt(name: str, field: str) -> _Render:
    """``--name=value`` when the field is set (non-empty, not None, not False)."""

    def render(req: JobRequest) -> list[str]:
        value = getattr(req, field)
        if value is None or value == "" or value is False:
            return []
        return [f"--{name}" if value is True else f"--{name}={value}"]

    return render


def _nodes(req: JobRequest) -> list[str]:
    if req.nodes is None:
        return []
    return [f"--nodes={req.nodes}-{req.max_nodes}" if req.max_nodes else f"--nodes={req.nodes}"]


def _gpus(req: JobRequest) -> list[str]:
    prefix = f"{req.gpu_type}:" if req.gpu_type else ""
    return [f"--gpus={prefix}{req.gpus}"] if req.gpus else []


def _gres(req: JobRequest) -> list[str]:
    prefix = f"{req.gpu_type}:" if req.gpu_type else ""
    return [f"--gres=gpu:{prefix}{req.gpus_per_node}"] if req.gpus_per_node else []


def _time(req: JobRequest) -> list[str]:
    if req.time_unlimited:
        return ["--time=UNLIMITED"]
    return [f"--time={slurm_time(req.time_limit_seconds)}"] if req.time_limit_seconds else []


def _hosts(name: str, field: str) -> _Render:
    def render(req: JobRequest) -> list[str]:
        hosts = getattr(req, field)
        return [f"--{name}={compress_hostlist(hosts)}"] if hosts else []

    return render


def _export(req: JobRequest) -> list[str]:
    # The variables themselves travel in the script (clusterd.jobs.script): sbatch's own
    # environment holds only identity and PATH, so ALL exports those and the script adds the rest.
    return ["--export=ALL" if req.export.mode is ExportMode.ALL else "--export=NONE"]


def _render_with(name: str, field: str) -> _Render:
    def render(req: JobRequest) -> list[str]:
        value = getattr(req, field)
        return [f"--{name}={value.render()}"] if value is not None else []

    return render


def _none(_req: JobRequest) -> list[str]:
    return []


def _typed_gpus(name: str, field: str) -> _Render:
    def render(req: JobRequest) -> list[str]:
        count = getattr(req, field)
        prefix = f"{req.gpu_type}:" if req.gpu_type else ""
        return [f"--{name}={prefix}{count}"] if count else []

    return render


def _sharing(req: JobRequest) -> list[str]:
    if req.sharing is None:
        return []
    if req.sharing is Sharing.OVERSUBSCRIBE:
        return ["--oversubscribe"]
    return ["--exclusive" if req.sharing is Sharing.EXCLUSIVE else f"--exclusive={req.sharing.value}"]


def _kill_on_invalid_dep(req: JobRequest) -> list[str]:
    if req.kill_on_invalid_dep is None:
        return []
    return [f"--kill-on-invalid-dep={'yes' if req.kill_on_invalid_dep else 'no'}"]


# One renderer per JobRequest field (a test pins that none is missing).
SBATCH_RENDERERS: dict[str, _Render] = {
    "script": _none,  # on stdin
    "name": _opt("job-name", "name"),
    "user": _none,  # sbatch runs as the user (CommandsBackend)
    "comment": _opt("comment", "comment"),
    "partition": _opt("partition", "partition"),
    "account": _opt("account", "account"),
    "qos": _opt("qos", "qos"),
    "reservation": _opt("reservation", "reservation"),
    "nodes": _nodes,
    "max_nodes": _none,  # with nodes
    "ntasks": _opt("ntasks", "ntasks"),
    "tasks_per_node": _opt("ntasks-per-node", "tasks_per_node"),
    "cpus_per_task": _opt("cpus-per-task", "cpus_per_task"),
    "gpus": _gpus,
    "gpus_per_task": _typed_gpus("gpus-per-task", "gpus_per_task"),
    "cpus_per_gpu": _opt("cpus-per-gpu", "cpus_per_gpu"),
    "memory_mb_per_gpu": lambda r: [f"--mem-per-gpu={r.memory_mb_per_gpu}M"] if r.memory_mb_per_gpu else [],
    "tasks_per_gpu": _opt("ntasks-per-gpu", "tasks_per_gpu"),
    "tasks_per_core": _opt("ntasks-per-core", "tasks_per_core"),
    "gpu_bind": _opt("gpu-bind", "gpu_bind"),
    "gres_flags": _opt("gres-flags", "gres_flags"),
    "hint": _opt("hint", "hint"),
    "distribution": _opt("distribution", "distribution"),
    "sockets_per_node": _opt("sockets-per-node", "sockets_per_node"),
    "cores_per_socket": _opt("cores-per-socket", "cores_per_socket"),
    "threads_per_core": _opt("threads-per-core", "threads_per_core"),
    "min_cpus_per_node": _opt("mincpus", "min_cpus_per_node"),
    "contiguous": _opt("contiguous", "contiguous"),
    "spread_job": _opt("spread-job", "spread_job"),
    "kill_on_invalid_dep": _kill_on_invalid_dep,
    "deadline": _opt("deadline", "deadline"),
    "time_min_seconds": lambda r: [f"--time-min={slurm_time(r.time_min_seconds)}"] if r.time_min_seconds else [],
    "wckey": _opt("wckey", "wckey"),
    "tmp_mb": lambda r: [f"--tmp={r.tmp_mb}M"] if r.tmp_mb else [],
    "tasks_per_socket": _opt("ntasks-per-socket", "tasks_per_socket"),
    "gpus_per_socket": _typed_gpus("gpus-per-socket", "gpus_per_socket"),
    "delay_boot_seconds": lambda r: (
        [f"--delay-boot={slurm_time(r.delay_boot_seconds)}"] if r.delay_boot_seconds else []
    ),
    "overcommit": _opt("overcommit", "overcommit"),
    "no_kill": _opt("no-kill", "no_kill"),
    "use_min_nodes": _opt("use-min-nodes", "use_min_nodes"),
    "wait_all_nodes": lambda r: [f"--wait-all-nodes={int(r.wait_all_nodes)}"] if r.wait_all_nodes is not None else [],
    "mem_bind": _opt("mem-bind", "mem_bind"),
    "acctg_freq": _opt("acctg-freq", "acctg_freq"),
    "licenses": _opt("licenses", "licenses"),
    "batch_features": _opt("batch", "batch_features"),
    "gpus_per_node": _gres,
    "gpu_type": _none,  # with gpus / gpus_per_node
    "memory_mb_per_node": lambda r: [f"--mem={r.memory_mb_per_node}M"] if r.memory_mb_per_node is not None else [],
    "memory_mb_per_cpu": lambda r: [f"--mem-per-cpu={r.memory_mb_per_cpu}M"] if r.memory_mb_per_cpu else [],
    "time_limit_seconds": _time,
    "time_unlimited": _none,  # with time_limit_seconds
    "constraint": _opt("constraint", "constraint"),
    "nodelist": _hosts("nodelist", "nodelist"),
    "exclude": _hosts("exclude", "exclude"),
    "switches": _render_with("switches", "switches"),
    "working_directory": _opt("chdir", "working_directory"),
    "submit_directory": _none,  # sbatch's own working directory (CommandsBackend)
    "stdout": _opt("output", "stdout"),
    "stderr": _opt("error", "stderr"),
    "stdin": _opt("input", "stdin"),
    "array": _render_with("array", "array"),
    "dependency": _opt("dependency", "dependency"),
    "begin": _opt("begin", "begin"),
    "hold": _opt("hold", "hold"),
    "sharing": _sharing,
    "mail_type": lambda r: [f"--mail-type={','.join(r.mail_type)}"] if r.mail_type else [],
    "mail_user": _opt("mail-user", "mail_user"),
    "nice": lambda r: [f"--nice={r.nice}"] if r.nice else [],
    "requeue": lambda r: ["--requeue" if r.requeue else "--no-requeue"],
    "open_append": lambda r: ["--open-mode=append" if r.open_append else "--open-mode=truncate"],
    "signal": _render_with("signal", "signal"),
    "export": _export,
}


def sbatch_argv(req: JobRequest) -> list[str]:
    """``sbatch --parsable --ignore-pbs`` with one option per set field; the script goes on stdin.

    Options are always ``--name=value`` single tokens, so no value can be read as another option.
    The script's own directive lines are neutralised, so these are the only options sbatch applies.
    """
    argv = ["sbatch", "--parsable", "--ignore-pbs"]
    for render in SBATCH_RENDERERS.values():
        argv.extend(render(req))
    return argv


def parse_sbatch_parsable(stdout: str) -> str:
    """``sbatch --parsable`` prints ``jobid`` or ``jobid;cluster``."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = line.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"unexpected sbatch output: {stdout.strip()[:200]!r}")
    return job_id


def scancel_argv(job_id: str) -> list[str]:
    return ["scancel", job_id]


# Running steps of one job, one ``J.0 NODELIST`` per line; the batch and extern steps are not listed.
def steps_argv(job_id: str) -> list[str]:
    return ["squeue", "--steps", f"--jobs={job_id}", "--noheader", "--format=%i %N"]


def kill_step_argv(step_ids: list[str]) -> list[str]:
    return ["scancel", "--signal=KILL", *step_ids]


def node_down_argv(node: str, reason: str) -> list[str]:
    return ["scontrol", "update", f"nodename={node}", "state=down", f"reason={reason}"]


def node_drain_argv(node: str, reason: str) -> list[str]:
    return ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"]


def requeue_argv(job_id: str) -> list[str]:
    return ["scontrol", "requeue", job_id]


def update_job_argv(job_id: str, *, exclude_nodes: tuple[str, ...] | None, start_after: int | None) -> list[str]:
    """``scontrol update``: StartTime=now clears the ~120 s BeginTime hold Slurm puts on requeued jobs."""
    argv = ["scontrol", "update", f"jobid={job_id}"]
    if exclude_nodes is not None:
        argv.append(f"ExcNodeList={','.join(exclude_nodes)}")
    if start_after is not None:
        argv.append("StartTime=now" if start_after <= 0 else f"StartTime=now+{int(start_after)}")
    return argv


def hold_argv(job_id: str) -> list[str]:
    """``uhold``, not ``hold``: run by root, ``hold`` is an admin hold the user could not release."""
    return ["scontrol", "uhold", job_id]


def release_argv(job_id: str) -> list[str]:
    return ["scontrol", "release", job_id]


def supervise_argv(job_id: str, comment: str) -> list[str]:
    """Adoption: the record's tag as the job's comment, and requeueable (restarts need it)."""
    return ["scontrol", "update", f"jobid={job_id}", f"Comment={comment}", "Requeue=1"]


def admin_comment_argv(job_id: str, note: str) -> list[str]:
    return ["scontrol", "update", f"jobid={job_id}", f"AdminComment={note}"]


def sacct_argv(*, since: float, until: float, user: str | None) -> list[str]:
    """``sacct --json`` for jobs that ran in [since, until): every user's (root) or one user's."""
    who = ["--allusers"] if user is None else [f"--user={user}"]
    return ["sacct", "--json", f"--starttime={_sacct_time(since)}", f"--endtime={_sacct_time(until)}", *who]


def _sacct_time(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seconds))


# --states=all: newer releases' squeue --json honours squeue's default filter (pending, running,
# completing), so a job that finished or was cancelled would vanish from the poll instead of being
# seen in its final state (seen on 24.11 and 26.05). 22.05 ignores filters with --json: same output.
SQUEUE_ARGV = ["squeue", "--all", "--states=all", "--json"]
SINFO_ARGV = ["sinfo", "--json"]
# A partial look at the queue (see SlurmBackend.poll_jobs): every job not PENDING, and the jobs asked
# for by id. Both filters are honoured with --json from 24.11 on (verified on 24.11 and 26.05.5;
# 22.05 ignores them).
PARTIAL_QUEUE_FROM = (24, 11)
_NOT_PENDING = (
    "RUNNING,SUSPENDED,COMPLETING,CONFIGURING,COMPLETED,CANCELLED,FAILED,TIMEOUT,NODE_FAIL,PREEMPTED,"
    "BOOT_FAIL,DEADLINE,OUT_OF_MEMORY,SPECIAL_EXIT,STOPPED,SIGNALING,STAGE_OUT,RESIZING"
)
SQUEUE_NOT_PENDING_ARGV = ["squeue", "--all", f"--states={_NOT_PENDING}", "--json"]
# Every job's id and state, from slurmctld's job-state RPC (asked from 24.11 on): no job record packed.
SQUEUE_STATES_ARGV = ["squeue", "--only-job-state", "--noheader", "--format=%i %T"]


def squeue_jobs_argv(job_ids: frozenset[str]) -> list[str]:
    """``squeue --json`` of these jobs (or arrays: all their elements), in any state.

    One id alone is asked twice: with a single id squeue loads only that job and fails ("Invalid job
    id specified") once it left slurmctld's memory; with a list it drops the ids it does not know.
    """
    ids = sorted(i for i in job_ids if i.isdigit())  # Slurm's own ids, never a flag or a range
    if len(ids) == 1:
        ids *= 2
    return ["squeue", "--all", "--states=all", f"--jobs={','.join(ids)}", "--json"]


# Newer releases group sinfo --json by state and leave each node's address out (seen on 24.11 and
# 26.05: "addresses": []), which the liveness probe needs; scontrol prints one record per node with
# address and slurmd port, in the same NODE shape slurmrestd's GET nodes has. 22.05 has no --json here.
NODES_JSON_ARGV = ["scontrol", "show", "nodes", "--json"]
NODES_JSON_FROM = (23, 11)  # the oldest release it is used on (verified: 24.11, 26.05)
TOPOLOGY_ARGV = ["scontrol", "show", "topology"]
PARTITIONS_ARGV = ["scontrol", "show", "partition", "--oneliner"]
VERSION_ARGV = ["sbatch", "--version"]


def node_resume_argv(node: str) -> list[str]:
    return ["scontrol", "update", f"nodename={node}", "state=resume"]


def reservation_argv(name: str, node: str, user: str, minutes: int) -> list[str]:
    """A maintenance reservation of ``node`` for ``user`` alone, from now: once the node is resumed,
    no other user's job lands there. Slurm refuses it while a job runs there (no IGNORE_JOBS: a
    tenant's job started on a node an operator resumed meanwhile): the probe is tried later."""
    return [
        "scontrol",
        "create",
        "reservation",
        f"reservationname={name}",
        f"nodes={node}",
        "starttime=now",
        f"duration={minutes}",
        f"users={user}",
        "flags=maint",
    ]


def reservation_delete_argv(name: str) -> list[str]:
    return ["scontrol", "delete", f"reservation={name}"]


def reservation_extend_argv(name: str, minutes: int) -> list[str]:
    """``name`` to end ``minutes`` from now (whenever it started)."""
    return ["scontrol", "update", f"reservationname={name}", f"endtime=now+{minutes}minutes"]


RESERVATIONS_ARGV = ["scontrol", "show", "reservation", "--oneliner"]


def node_probe_argv(
    node: str,
    reservation: str,
    command: tuple[str, ...],
    minutes: int,
    wait: int,
    *,
    partition: str = "",
    gpus: int = 0,
) -> list[str]:
    """``command`` as one task on ``node`` inside ``reservation``, with the whole node (exclusive, all
    its ``gpus``: the probe sees them) in one of the node's partitions (the default one may not have
    it); srun gives up when the node is not allocated within ``wait`` seconds, and Slurm ends the
    task after ``minutes``."""
    return [
        "srun",
        f"--reservation={reservation}",
        *([f"--partition={partition}"] if partition else []),
        f"--nodelist={node}",
        "--nodes=1",
        "--ntasks=1",
        "--exclusive",
        *([f"--gres=gpu:{gpus}"] if gpus > 0 else []),
        f"--time={minutes}",
        f"--immediate={wait}",
        "--job-name=clusterd-health-probe",
        "--chdir=/",
        "--",
        *command,
    ]
