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

from clusterd.jobs.validate import parse_time_limit
from clusterd.slurm import restd_submit
from clusterd.slurm.restd_submit import _refuse
from clusterd.slurm.types import SubmitArgs

Body = dict[str, Any]


@dataclass(frozen=True)
class RestApi:
    """One slurmrestd API version: how to build its submit and update bodies."""

    name: str
    data_parser: bool
    # v0.0.40's JOB_DESC_MSG has no "hold" key: a held job is priority 0, as sbatch --hold sends.
    hold_key: bool = True

    @property
    def defers_switches(self) -> bool:
        """v0.0.38 disables ``required_switches``: the caller applies ``--switches`` afterwards."""
        return not self.data_parser

    def submit_body(self, args: SubmitArgs, base_environment: Mapping[str, str], *, now: float | None = None) -> Body:
        if not self.data_parser:
            return restd_submit.job_description(args, base_environment)
        return _data_parser_submit(self, args, base_environment, time.time() if now is None else now)

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
    RestApi("v0.0.42", data_parser=True),
    RestApi("v0.0.43", data_parser=True),
    RestApi("v0.0.44", data_parser=True),
    RestApi("v0.0.45", data_parser=True),
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


def slurm_seconds(option: str, value: str) -> int | None:
    """Slurm's time syntax (``M``, ``M:S``, ``H:M:S``, ``D-H[:M[:S]]``) in seconds; None = infinite.

    The service's own parser (:func:`clusterd.jobs.validate.parse_time_limit`), plus ``-1``, which
    Slurm also reads as infinite; what it cannot read is refused by option name.
    """
    text = value.strip()
    if text == "-1":
        return None
    try:
        return parse_time_limit(text)
    except ValueError:
        raise _refuse(option, f"cannot read time {value!r}") from None


def _minutes(option: str) -> Callable[[str], Any]:
    """Time limit -> minutes as a number object, rounded up like Slurm's time_str2mins."""

    def convert(value: str) -> Any:
        secs = slurm_seconds(option, value)
        return INFINITE if secs is None else number((secs + 59) // 60)

    return convert


_NOW_RE = re.compile(r"^now(?:\+(\d+)(seconds?|minutes?|hours?|days?|weeks?|[smhdw]|sec|min)?)?$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _timestamp(option: str, value: str, now: float) -> int:
    """``now[+N[unit]]`` (seconds by default, as sbatch) or ``YYYY-MM-DD[THH:MM[:SS]]`` local time."""
    m = _NOW_RE.match(value.strip())
    if m:
        unit = (m.group(2) or "s")[0].lower()
        return int(now) + int(m.group(1) or 0) * _UNIT_SECONDS[unit]
    with contextlib.suppress(ValueError):
        return int(dt.datetime.fromisoformat(value.strip()).timestamp())
    raise _refuse(option, f"{value!r}: only now[+N[unit]] or YYYY-MM-DD[THH:MM[:SS]] can be sent as a timestamp")


def _csv_list(value: str) -> list[str]:
    """Split ``a,b[1,3],c`` at the commas outside brackets: node lists are arrays from v0.0.40 on."""
    parts, depth, cur = [], 0, ""
    for ch in value:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _merge_tres(existing: str | None, new: str) -> str:
    """Add ``gres/x:...`` entries, replacing an earlier entry for the same ``gres/x``."""
    entries: dict[str, str] = {}
    for entry in _csv_list(existing or "") + _csv_list(new):
        entries[":".join(entry.split(":")[:1])] = entry
    return ",".join(entries.values())


def _gres_to_tres(value: str) -> str:
    """``--gres=gpu:4,nvme:1`` -> ``gres/gpu:4,gres/nvme:1`` (what sbatch puts in tres_per_node)."""
    return ",".join(e if e.startswith("gres/") else f"gres/{e}" for e in _csv_list(value))


# ---------------------------------------------------------------------- option mapping
_SIGNAL_RE = re.compile(r"^(?:(?P<flags>[RB]+):)?(?:SIG)?(?P<sig>[A-Z0-9]+)(?:@(?P<time>\d+))?$", re.IGNORECASE)
_WARN_FLAGS = {"B": "BATCH_JOB", "R": "RESERVATION_JOB"}  # sbatch: B: -> KILL_JOB_BATCH, R: -> KILL_JOB_RESV
_SHARED = {"": "none", "user": "user", "mcs": "mcs", "topo": "topo"}
_SIMPLE = {  # sbatch option -> JOB_DESC_MSG string key
    "job-name": "name",
    "nodes": "nodes",  # JOB_DESC_MSG_NODES takes "2" or "2-4", like sbatch -N
    "comment": "comment",
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "constraint": "constraints",
    "output": "standard_output",
    "error": "standard_error",
    "input": "standard_input",
    "chdir": "current_working_directory",
    "dependency": "dependency",
    "reservation": "reservation",
    "licenses": "licenses",
    "mail-user": "mail_user",
    "wckey": "wckey",
    "array": "array",
}
_INTS = {"ntasks": "tasks", "ntasks-per-node": "tasks_per_node", "cpus-per-task": "cpus_per_task"}
_TRES = {  # option -> (key, prefix): sbatch's own translation of GPU options into TRES strings
    "gpus": ("tres_per_job", "gres/gpu:"),
    "gpus-per-node": ("tres_per_node", "gres/gpu:"),
    "gpus-per-task": ("tres_per_task", "gres/gpu:"),
    "cpus-per-gpu": ("cpus_per_tres", "gres/gpu:"),
}
_DP_UNSUPPORTED = {
    "uid": "the job's user is the one the request is signed for, not an option",
    "gid": "the job runs with its user's primary group",
    "export-file": "slurmrestd refuses to load an environment from a file",
    "get-user-env": "not available through the service",
    "wrap": "the script is always given",
    "parsable": "a command-line flag of sbatch, not a job property",
    "mail-type": "the data_parser names of mail flags were not established",
}


def _dp_apply(api: RestApi, job: Body, name: str, value: str, now: float) -> None:
    """Put one ``--name=value`` into ``job`` (a JOB_DESC_MSG) or refuse it by name."""
    option = f"--{name}"
    if name in _SIMPLE:
        job[_SIMPLE[name]] = value
    elif name in _INTS:
        job[_INTS[name]] = restd_submit._int(option)(value)
    elif name in ("gres", "tres-per-node"):
        tres = _gres_to_tres(value) if name == "gres" else value
        job["tres_per_node"] = _merge_tres(job.get("tres_per_node"), tres)
    elif name in _TRES:
        key, prefix = _TRES[name]
        job[key] = _merge_tres(job.get(key), prefix + value) if key == "tres_per_node" else prefix + value
    elif name in ("requeue", "no-requeue"):
        job["requeue"] = restd_submit._flag(option, name == "requeue")(value)
    elif name == "hold":
        restd_submit._flag(option, True)(value)
        if api.hold_key:
            job["hold"] = True
        else:
            job["priority"] = 0
    elif name == "open-mode":
        job["open_mode"] = [restd_submit._open_mode(value).upper()]
    elif name in ("mem", "mem-per-cpu"):
        key = "memory_per_node" if name == "mem" else "memory_per_cpu"
        job[key] = number(restd_submit._megabytes(option)(value))
    elif name in ("time", "time-min"):
        job["time_limit" if name == "time" else "time_minimum"] = _minutes(option)(value)
    elif name in ("exclude", "nodelist"):
        job["excluded_nodes" if name == "exclude" else "required_nodes"] = _csv_list(value)
    elif name == "begin":
        job["begin_time"] = number(_timestamp(option, value, now))
    elif name == "deadline":
        job["deadline"] = _timestamp(option, value, now)
    elif name == "exclusive":
        if value not in _SHARED:
            raise _refuse(option, f"expects user, mcs, topo or no value, got {value!r}")
        job["shared"] = [_SHARED[value]]
    elif name == "signal":
        job.update(_dp_signal(value))
    elif name == "switches":
        job.update(_dp_switches(value))
    elif name == "export":
        restd_submit._export(value)
    elif name in _DP_UNSUPPORTED:
        raise _refuse(option, _DP_UNSUPPORTED[name])
    else:
        raise _refuse(option, f"no slurmrestd {api.name} job field for this option")


def _dp_signal(value: str) -> Body:
    """``[B|R:]SIG[@T]`` -> kill_warning_*: the B: flag reaches the batch shell, as with sbatch."""
    m = _SIGNAL_RE.match(value)
    if not m:
        raise _refuse("--signal", f"cannot read {value!r}")
    flags = sorted({_WARN_FLAGS[f] for f in (m.group("flags") or "").upper()})
    delay = int(m.group("time")) if m.group("time") else 60  # sbatch's default warning time
    if delay > 0xFFFE:
        raise _refuse("--signal", f"{value!r}: the warning time must be below 65535 seconds")
    body: Body = {"kill_warning_signal": m.group("sig").upper(), "kill_warning_delay": number(delay)}
    if flags:
        body["kill_warning_flags"] = flags
    return body


def _dp_switches(value: str) -> Body:
    """``N[@wait]`` -> required_switches (+ wait_for_switch in seconds, Slurm time syntax as sbatch)."""
    m = re.fullmatch(r"(\d+)(?:@(.+))?", value)
    if not m:
        raise _refuse("--switches", f"cannot read {value!r}")
    body: Body = {"required_switches": number(int(m.group(1)))}
    if m.group(2):
        secs = slurm_seconds("--switches", m.group(2))
        if secs is None:
            raise _refuse("--switches", f"{value!r}: the wait must be finite")
        body["wait_for_switch"] = secs
    return body


def _data_parser_submit(api: RestApi, args: SubmitArgs, base_environment: Mapping[str, str], now: float) -> Body:
    """``POST /slurm/v0.0.4x/job/submit`` body: the script's #SBATCH lines, then the options on top."""
    job, environment = restd_submit.collect_job(
        args, base_environment, lambda job, name, value, _ours: _dp_apply(api, job, name, value, now)
    )
    job["environment"] = [f"{k}={v}" for k, v in environment.items()]
    job["script"] = args.script
    # The top-level script is what 23.11's handler checks; newer ones also read job.script.
    return {"script": args.script, "job": job}
