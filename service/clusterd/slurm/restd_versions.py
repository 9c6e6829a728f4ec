"""slurmrestd API versions clusterd speaks, and the request bodies each one takes (pure).

Detection (``GET /openapi/v3``) picks the newest version both sides know; :func:`api_for` then
gives the strategy for it. Two families:

* ``v0.0.38`` (Slurm 22.05, verified against a running slurmrestd): :mod:`restd_submit`.
* ``v0.0.40`` ... ``v0.0.45`` (Slurm 23.11 ... 26.05, ``data_parser``): built here from the
  ``JOB_DESC_MSG`` / ``JOB_SUBMIT_REQ`` parser tables of ``src/plugins/data_parser/v0.0.4x/
  parsers.c`` (read for v0.0.40, v0.0.41 and v0.0.45; v0.0.42-44 sit between them and carry the
  same keys) and the job handlers of ``src/slurmrestd/plugins/openapi/slurmctld/jobs.c``. No
  newer Slurm runs here, so these bodies are documented, not exercised against a server.

What changes from v0.0.38: numbers that may be unset/infinite are ``{set, infinite, number}``
objects (``time_limit`` in minutes, memory in MB, ``begin_time`` in unix seconds); the
environment is a ``"K=V"`` list; GRES requests are ``tres_per_node``/``tres_per_job``/
``tres_per_task`` strings (``"gres/gpu:4"``; there is no ``gres`` key); node lists are arrays;
``open_mode``/``shared`` are flag lists; ``--signal=B:SIG@T`` is expressible
(``kill_warning_flags: ["BATCH_JOB"]``), so it is sent as asked instead of downgraded; and
``required_switches``/``wait_for_switch`` are live keys, so no post-submit ``scontrol update`` is
needed. A job update (``POST job/{id}``) takes the job description at the top level.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from clusterd.slurm import restd_submit
from clusterd.slurm.request import JobRequest, Sharing
from clusterd.slurm.restd_submit import refuse

Body = dict[str, Any]


@dataclass(frozen=True)
class RestApi:
    """One slurmrestd API version: how to build its submit and update bodies."""

    name: str
    data_parser: bool
    # v0.0.40's JOB_DESC_MSG has no "hold" key: a held job is priority 0, as sbatch --hold sends.
    hold_key: bool = True
    # From v0.0.42 a job left without "oom_kill_step" gets 0 (OOMKillStep=0, overriding the
    # cluster's TaskPluginParam default) where sbatch leaves it unset: the body says unset (NO_VAL16).
    # v0.0.40/41 cannot say it; their jobs show OOMKillStep=0 (24.11).
    oom_kill_step_key: bool = False

    @property
    def defers_switches(self) -> bool:
        """v0.0.38 disables ``required_switches``: the caller applies ``--switches`` afterwards."""
        return not self.data_parser

    def submit_body(self, req: JobRequest, base_environment: Mapping[str, str], *, now: float | None = None) -> Body:
        if not self.data_parser:
            return restd_submit.job_description(req, base_environment)
        return _data_parser_submit(self, req, base_environment, time.time() if now is None else now)

    def update_body(
        self, *, exclude_nodes: tuple[str, ...] | None, start_after: int | None, now: float | None = None
    ) -> Body:
        """``POST job/{id}``: ``exclude_nodes`` (() clears the list) and a begin time now+N seconds."""
        body: Body = {}
        if not self.data_parser:
            if exclude_nodes is not None:
                body["exclude_nodes"] = ",".join(exclude_nodes)
            if start_after is not None:
                body["begin_time"] = "now" if start_after <= 0 else f"now+{int(start_after)}"
            return body
        if exclude_nodes is not None:
            # CSV_STRING: a list sets the nodes; "" (a string) is what clears them, as in scontrol.
            body["excluded_nodes"] = list(exclude_nodes) if exclude_nodes else ""
        if start_after is not None:
            stamp = int(time.time() if now is None else now) + max(int(start_after), 0)
            body["begin_time"] = number(stamp)
        return body


# Oldest first. v0.0.39 (23.02) is left out: its job handlers differ and were not established.
_APIS = (
    RestApi("v0.0.38", data_parser=False),
    RestApi("v0.0.40", data_parser=True, hold_key=False),
    RestApi("v0.0.41", data_parser=True),
    RestApi("v0.0.42", data_parser=True, oom_kill_step_key=True),
    RestApi("v0.0.43", data_parser=True, oom_kill_step_key=True),
    RestApi("v0.0.44", data_parser=True, oom_kill_step_key=True),
    RestApi("v0.0.45", data_parser=True, oom_kill_step_key=True),
)
KNOWN_API_VERSIONS: tuple[str, ...] = tuple(api.name for api in _APIS)
_BY_NAME = {api.name: api for api in _APIS}


def api_for(name: str) -> RestApi:
    """The strategy for a known version name (KeyError otherwise: callers check first)."""
    return _BY_NAME[name]


def choose(offered: set[str]) -> str | None:
    """The newest version both the server (``offered``) and clusterd know, or None."""
    usable = [v for v in KNOWN_API_VERSIONS if v in offered]
    return usable[-1] if usable else None


# ---------------------------------------------------------------------- value shapes
def number(value: int) -> dict[str, Any]:
    """A data_parser ``*_NO_VAL`` number set to ``value``."""
    return {"set": True, "infinite": False, "number": value}


INFINITE = {"set": True, "infinite": True, "number": 0}
_NO_VAL16 = 0xFFFE  # Slurm's "not set" for a 16-bit field that the data_parser takes as a plain integer


_NOW_RE = re.compile(r"^now(?:\+([0-9]+)(seconds?|minutes?|hours?|days?|weeks?|[smhdw]|sec|min)?)?\Z", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _timestamp(option: str, value: str, now: float) -> int:
    """``now[+N[unit]]`` (seconds by default, as sbatch) or ``YYYY-MM-DD[THH:MM[:SS]]`` local time."""
    m = _NOW_RE.match(value.strip())
    if m:
        unit = (m.group(2) or "s")[0].lower()
        return int(now) + int(m.group(1) or 0) * _UNIT_SECONDS[unit]
    with contextlib.suppress(ValueError):
        return int(dt.datetime.fromisoformat(value.strip()).timestamp())
    raise refuse(option, f"{value!r}: only now[+N[unit]] or YYYY-MM-DD[THH:MM[:SS]] can be sent as a timestamp")


# ---------------------------------------------------------------------- request rendering
DpRender = Callable[[Body, JobRequest, RestApi, float], None]


def _key(key: str, field: str) -> DpRender:
    def render(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
        value = getattr(req, field)
        if value not in (None, "", (), False):
            job[key] = value

    return render


def _none(_job: Body, _req: JobRequest, _api: RestApi, _now: float) -> None:
    return None


def _nodes(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
    if req.nodes is not None:
        job["nodes"] = f"{req.nodes}-{req.max_nodes}" if req.max_nodes else str(req.nodes)


def _time(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
    if req.time_unlimited:
        job["time_limit"] = INFINITE
    elif req.time_limit_seconds is not None:
        job["time_limit"] = number(restd_submit.minutes(req.time_limit_seconds))


def _memory(key: str, field: str) -> DpRender:
    def render(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
        value = getattr(req, field)
        if value:
            job[key] = number(value)

    return render


def _gpus(key: str, field: str) -> DpRender:
    """sbatch's own translation of GPU options into TRES strings (``gres/gpu[:TYPE]:N``)."""

    def render(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
        value = getattr(req, field)
        if value:
            job[key] = f"gres/gpu:{restd_submit.gpu_count(req, value)}"

    return render


def _hosts(key: str, field: str) -> DpRender:
    def render(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
        hosts = getattr(req, field)
        if hosts:
            job[key] = list(hosts)

    return render


def _switches(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
    if req.switches is not None:
        job["required_switches"] = number(req.switches.count)
        if req.switches.wait_seconds is not None:
            job["wait_for_switch"] = req.switches.wait_seconds


def _begin(job: Body, req: JobRequest, _api: RestApi, now: float) -> None:
    if req.begin:
        job["begin_time"] = number(_timestamp("--begin", req.begin, now))


def _hold(job: Body, req: JobRequest, api: RestApi, _now: float) -> None:
    if req.hold:
        if api.hold_key:
            job["hold"] = True
        else:
            job["priority"] = 0  # v0.0.40 has no "hold": a held job is priority 0, as sbatch --hold sends


def _mail_type(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
    if req.mail_type:
        raise refuse("--mail-type", "the data_parser names of mail flags were not established")


def _signal(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
    """``[B:]SIG@T`` -> kill_warning_*: the B: flag reaches the batch shell, as with sbatch."""
    if req.signal is not None:
        if req.signal.reservation_end:
            raise refuse(f"--signal={req.signal.render()}", "the R: flag's data_parser name was not established")
        job["kill_warning_signal"] = req.signal.name
        job["kill_warning_delay"] = number(req.signal.seconds)
        if req.signal.batch_only:
            job["kill_warning_flags"] = ["BATCH_JOB"]


def _export(_job: Body, req: JobRequest, api: RestApi, _now: float) -> None:
    if restd_submit.login_environment(req):  # JOB_DESC_MSG has no get-user-env field
        raise refuse(
            f"--export={req.export.mode.value}",
            f"{api.name} cannot ask for the user's login environment (sbatch --get-user-env)",
        )


def _memory_per_node(job: Body, req: JobRequest, api: RestApi, _now: float) -> None:
    if req.memory_mb_per_node == 0:  # --mem=0: all of each node's memory
        raise refuse("--mem=0", f"whether {api.name} reads 0 as sbatch does was not established")
    if req.memory_mb_per_node is not None:
        job["memory_per_node"] = number(req.memory_mb_per_node)


def _tres(key: str, field: str) -> DpRender:
    """A per-GPU amount as a TRES string (``cpus_per_tres: "gres/gpu:4"``), as sbatch sends it."""

    def render(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
        value = getattr(req, field)
        if value:
            job[key] = f"gres/gpu:{value}"

    return render


def _sharing(job: Body, req: JobRequest, _api: RestApi, _now: float) -> None:
    if req.sharing is not None:
        job["shared"] = ["none" if req.sharing is Sharing.EXCLUSIVE else req.sharing.value]


def _by_sbatch(option: str, field: str) -> DpRender:
    """A field whose data_parser key was not established: the request goes to sbatch (as the caller)."""

    def render(_job: Body, req: JobRequest, api: RestApi, _now: float) -> None:
        if getattr(req, field) not in (None, "", (), False):
            raise refuse(option, f"its {api.name} key was not established")

    return render


def _deadline(job: Body, req: JobRequest, _api: RestApi, now: float) -> None:
    if req.deadline:
        job["deadline"] = _timestamp("--deadline", req.deadline, now)


DP_RENDERERS: dict[str, DpRender] = {
    "script": lambda job, r, _a, _n: job.update(script=r.script),  # 23.11 reads the top level, newer job.script
    "name": _key("name", "name"),
    "user": _none,  # the token is signed for the user (RestdBackend)
    "comment": _key("comment", "comment"),
    "partition": _key("partition", "partition"),
    "account": _key("account", "account"),
    "qos": _key("qos", "qos"),
    "reservation": _key("reservation", "reservation"),
    "nodes": _nodes,
    "max_nodes": _none,  # with nodes
    "ntasks": _key("tasks", "ntasks"),
    "tasks_per_node": _key("tasks_per_node", "tasks_per_node"),
    "cpus_per_task": _key("cpus_per_task", "cpus_per_task"),
    "gpus": _gpus("tres_per_job", "gpus"),
    "gpus_per_node": _gpus("tres_per_node", "gpus_per_node"),
    "gpu_type": _none,  # with gpus / gpus_per_node
    "memory_mb_per_node": _memory_per_node,
    "memory_mb_per_cpu": _memory("memory_per_cpu", "memory_mb_per_cpu"),
    "time_limit_seconds": _time,
    "time_unlimited": _none,  # with time_limit_seconds
    "constraint": _key("constraints", "constraint"),
    "nodelist": _hosts("required_nodes", "nodelist"),
    "exclude": _hosts("excluded_nodes", "exclude"),
    "switches": _switches,
    "working_directory": _key("current_working_directory", "working_directory"),
    "submit_directory": _none,  # SLURM_SUBMIT_DIR in the environment
    "stdout": _key("standard_output", "stdout"),
    "stderr": _key("standard_error", "stderr"),
    "stdin": _key("standard_input", "stdin"),
    "array": lambda job, r, _a, _n: job.update(array=r.array.render()) if r.array else None,
    "dependency": _key("dependency", "dependency"),
    "begin": _begin,
    "hold": _hold,
    "sharing": _sharing,
    "mail_type": _mail_type,
    "mail_user": _key("mail_user", "mail_user"),
    "nice": _key("nice", "nice"),
    "requeue": lambda job, r, _a, _n: job.update(requeue=r.requeue),
    "open_append": lambda job, r, _a, _n: job.update(open_mode=["APPEND" if r.open_append else "TRUNCATE"]),
    "signal": _signal,
    "export": _export,  # the environment: below
    "gpus_per_task": _gpus("tres_per_task", "gpus_per_task"),
    "cpus_per_gpu": _tres("cpus_per_tres", "cpus_per_gpu"),
    "memory_mb_per_gpu": _tres("memory_per_tres", "memory_mb_per_gpu"),
    "tasks_per_gpu": _key("ntasks_per_tres", "tasks_per_gpu"),
    "tasks_per_core": _key("tasks_per_core", "tasks_per_core"),
    "gpu_bind": _by_sbatch("--gpu-bind", "gpu_bind"),
    "gres_flags": _by_sbatch("--gres-flags", "gres_flags"),
    "hint": _by_sbatch("--hint", "hint"),
    "distribution": _by_sbatch("--distribution", "distribution"),
    "sockets_per_node": _key("sockets_per_node", "sockets_per_node"),
    # 24.11's v0.0.42 takes the key and drops it (ReqB:S:C:T shows no cores): sbatch carries it.
    "cores_per_socket": _by_sbatch("--cores-per-socket", "cores_per_socket"),
    "threads_per_core": _key("threads_per_core", "threads_per_core"),
    "min_cpus_per_node": _by_sbatch("--mincpus", "min_cpus_per_node"),
    "contiguous": _key("contiguous", "contiguous"),
    "spread_job": _by_sbatch("--spread-job", "spread_job"),
    "kill_on_invalid_dep": lambda job, r, _a, _n: (
        job.update(kill_on_invalid_dependency=r.kill_on_invalid_dep) if r.kill_on_invalid_dep is not None else None
    ),
    "deadline": _deadline,
    "time_min_seconds": lambda job, r, _a, _n: (
        job.update(time_minimum=number(restd_submit.minutes(r.time_min_seconds))) if r.time_min_seconds else None
    ),
    "wckey": _key("wckey", "wckey"),
    "tmp_mb": _by_sbatch("--tmp", "tmp_mb"),
    "tasks_per_socket": _key("tasks_per_socket", "tasks_per_socket"),
    "gpus_per_socket": _gpus("tres_per_socket", "gpus_per_socket"),
    "delay_boot_seconds": _by_sbatch("--delay-boot", "delay_boot_seconds"),
    "overcommit": _by_sbatch("--overcommit", "overcommit"),
    "no_kill": _by_sbatch("--no-kill", "no_kill"),
    "use_min_nodes": _by_sbatch("--use-min-nodes", "use_min_nodes"),
    "wait_all_nodes": _by_sbatch("--wait-all-nodes", "wait_all_nodes"),
    "mem_bind": _by_sbatch("--mem-bind", "mem_bind"),
    "acctg_freq": _by_sbatch("--acctg-freq", "acctg_freq"),
    "licenses": _key("licenses", "licenses"),
    "batch_features": _by_sbatch("--batch", "batch_features"),
}


def _data_parser_submit(api: RestApi, req: JobRequest, base_environment: Mapping[str, str], now: float) -> Body:
    """``POST /slurm/v0.0.4x/job/submit`` body: one JOB_DESC_MSG key set per request field."""
    job: Body = {}
    for render in DP_RENDERERS.values():
        render(job, req, api, now)
    if api.oom_kill_step_key:
        job["oom_kill_step"] = _NO_VAL16  # as sbatch: the cluster's default applies
    environment = restd_submit.base_environment(req, base_environment)
    job["environment"] = [f"{k}={v}" for k, v in environment.items()]
    # The top-level script is what 23.11's handler checks; newer ones also read job.script.
    return {"script": req.script, "job": job}
