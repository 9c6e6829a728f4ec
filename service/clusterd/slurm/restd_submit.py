"""sbatch options -> slurmrestd v0.0.38 job description (pure; tested without a server).

slurmctld never reads ``#SBATCH`` lines (sbatch does, client-side), so a REST submission must carry
the script's header as JSON fields too: directives first, then the service's options on top (they
override the script, as on sbatch's command line). Every key below was checked against the
v0.0.38 plugin of a running Slurm 22.05 slurmrestd. An option without an exact equivalent is
refused with :class:`~clusterd.errors.SlurmError` naming it, before anything is submitted:
a silently dropped option would run a different job than the one asked for.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from clusterd.errors import SlurmError
from clusterd.jobs.script import ScriptError, parse_directives
from clusterd.slurm.types import SubmitArgs

COMMAND = "POST job/submit"

JSONValue = str | int | bool


def _text(value: str) -> str:
    return value


def _int(option: str) -> Callable[[str], int]:
    def convert(value: str) -> int:
        if not value.isdigit():
            raise _refuse(option, f"expects a whole number, got {value!r}")
        return int(value)

    return convert


def _flag(option: str, result: bool) -> Callable[[str], bool]:
    def convert(value: str) -> bool:
        if value:
            raise _refuse(option, f"takes no value, got {value!r}")
        return result

    return convert


_MEM_RE = re.compile(r"^(\d+)([KMGT]?)B?$", re.IGNORECASE)
_MEM_FACTOR = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "": 1}


def _megabytes(option: str) -> Callable[[str], int]:
    """``--mem=2G`` -> 2048: v0.0.38 takes memory as whole MB (sbatch's default unit)."""

    def convert(value: str) -> int:
        m = _MEM_RE.match(value.strip())
        if not m:
            raise _refuse(option, f"cannot read memory size {value!r}")
        mb = int(m.group(1)) * _MEM_FACTOR[m.group(2).upper()]
        if mb != int(mb):
            raise _refuse(option, f"{value!r} is not a whole number of megabytes")
        return int(mb)

    return convert


_SIGNAL_RE = re.compile(r"^(?:(?P<flags>[RB]+):)?(?P<sig>(?:SIG)?[A-Z0-9]+)(?:@(?P<time>\d+))?$", re.IGNORECASE)


def _signal(value: str, *, from_service: bool) -> str:
    """``--signal=[R:]SIG[@T]``. v0.0.38 advertises ``B:`` but its parser answers "Invalid SIGNAL
    specification", so only ``SIG@T`` (which Slurm sends to the job's steps, not the batch shell)
    can be sent. The service's own warning signal (``signal_before_timeout``) is sent that way:
    training run with ``srun`` still gets it, and a job that misses it is still requeued on its time
    limit from its last checkpoint. A script's own ``#SBATCH --signal=B:...`` is refused instead,
    because it asks for exactly what cannot be delivered."""
    m = _SIGNAL_RE.match(value)
    if not m:
        raise _refuse("--signal", f"cannot read {value!r}")
    flags = (m.group("flags") or "").upper()
    if flags == "B" and from_service:
        return value.split(":", 1)[1]
    if flags:
        raise _refuse(
            "--signal",
            f"{value!r}: slurmrestd v0.0.38 cannot carry the {m.group('flags')}: flag "
            "(only SIG@T, which signals job steps, not the batch shell); use the commands backend",
        )
    return value


def _open_mode(value: str) -> str:
    if value not in ("append", "truncate"):
        raise _refuse("--open-mode", f"expects append or truncate, got {value!r}")
    return value


def _exclusive(value: str) -> str:
    mode = value or "true"
    if mode not in ("user", "mcs", "true", "false"):
        raise _refuse("--exclusive", f"v0.0.38 accepts user, mcs or no value, got {value!r}")
    return mode


def _export(value: str) -> None:
    """``--export=ALL`` hands the job sbatch's environment: here, the request's ``environment``."""
    if value.upper() != "ALL":
        raise _refuse("--export", f"{value!r}: the job's environment is the request's environment (ALL) only")


# sbatch long option -> (v0.0.38 key, converter). Options not listed are refused by name.
_OPTIONS: dict[str, tuple[str, Callable[[str], JSONValue]]] = {
    "job-name": ("name", _text),
    "nodes": ("nodes", _text),  # "2" or "2-4": Slurm parses it like sbatch -N
    "ntasks": ("tasks", _int("--ntasks")),
    "ntasks-per-node": ("tasks_per_node", _int("--ntasks-per-node")),
    "cpus-per-task": ("cpus_per_task", _int("--cpus-per-task")),
    "gres": ("gres", _text),  # per node, as with sbatch --gres
    "gpus": ("gpus", _text),
    "gpus-per-node": ("gpus_per_node", _text),
    "gpus-per-task": ("gpus_per_task", _text),
    "cpus-per-gpu": ("cpus_per_gpu", _text),
    "requeue": ("requeue", _flag("--requeue", True)),
    "no-requeue": ("requeue", _flag("--no-requeue", False)),
    "open-mode": ("open_mode", _open_mode),
    "comment": ("comment", _text),
    "mem": ("memory_per_node", _megabytes("--mem")),
    "mem-per-cpu": ("memory_per_cpu", _megabytes("--mem-per-cpu")),
    "time": ("time_limit", _text),  # Slurm's own time syntax (minutes, [D-]HH:MM:SS, ...)
    "time-min": ("time_minimum", _text),
    "partition": ("partition", _text),
    "account": ("account", _text),
    "qos": ("qos", _text),
    "constraint": ("constraints", _text),
    "output": ("standard_output", _text),
    "error": ("standard_error", _text),
    "input": ("standard_input", _text),
    "exclude": ("exclude_nodes", _text),
    "nodelist": ("nodelist", _text),
    "chdir": ("current_working_directory", _text),
    "hold": ("hold", _flag("--hold", True)),
    "begin": ("begin_time", _text),
    "dependency": ("dependency", _text),
    "exclusive": ("exclusive", _exclusive),
    "reservation": ("reservation", _text),
    "licenses": ("licenses", _text),
    "mail-type": ("mail_type", _text),
    "mail-user": ("mail_user", _text),
    "wckey": ("wckey", _text),
    "array": ("array", _text),
    "deadline": ("deadline", _text),
}

# Known sbatch options that v0.0.38 disables or lacks (verified against the live plugin), with why.
_UNSUPPORTED = {
    "tres-per-node": "v0.0.38 has no tres_per_node field (use --gres or --gpus-per-node)",
    "uid": "the job's user is the one the request is signed for, not an option",
    "gid": "the job runs with its user's primary group; v0.0.38 cannot choose another",
    "export-file": "slurmrestd refuses to load an environment from a file",
    "get-user-env": "not available through the service",
    "wrap": "the script is always given",
    "parsable": "a command-line flag of sbatch, not a job property",
}


def _refuse(option: str, why: str) -> SlurmError:
    return refused(f"cannot express {option} through slurmrestd: {why}")


def refused(text: str) -> SlurmError:
    """A submission refused before sending: no HTTP status, nothing reached Slurm."""
    exc = SlurmError(COMMAND, 0, text)
    exc.args = (f"{COMMAND} failed (not sent): {exc.detail}",)
    return exc


def _option_pairs(options: Iterable[str]) -> list[tuple[str, str]]:
    """``--name=value`` / ``--flag`` tokens (the service's form) -> (name, value)."""
    pairs = []
    for token in options:
        if not token.startswith("--") or len(token) < 3:
            raise _refuse(token, "options must be single --name=value tokens")
        name, _, value = token[2:].partition("=")
        pairs.append((name, value))
    return pairs


def _apply(job: dict[str, Any], name: str, value: str, *, from_service: bool) -> None:
    if name == "export":
        _export(value)
        return
    if name == "switches":
        return  # v0.0.38 disables required_switches ('Disabled key'): set after submit, see deferred_switches
    if name == "signal":
        job["signal"] = _signal(value, from_service=from_service)
        return
    if name in _UNSUPPORTED:
        raise _refuse(f"--{name}", _UNSUPPORTED[name])
    entry = _OPTIONS.get(name)
    if entry is None:
        raise _refuse(f"--{name}", "no v0.0.38 job field for this option")
    key, convert = entry
    job[key] = convert(value)


def deferred_switches(args: SubmitArgs) -> str | None:
    """The ``--switches=N[@wait]`` to apply with ``scontrol update`` right after the submit.

    A job that starts before the update was placed by Slurm's own topology/tree best fit at once,
    which is what the constraint asks for anyway; a pending one gets the constraint and waits.
    """
    value = None
    with contextlib.suppress(ScriptError):  # job_description refuses such a script
        value = parse_directives(args.script).get("switches")
    for name, option_value in _option_pairs(args.options):
        if name == "switches":
            value = option_value
    if value is not None and not re.fullmatch(r"\d+(@[\w:-]+)?", value):
        raise _refuse("--switches", f"cannot read {value!r}")
    return value


# (job, option name, value, whether the option is the service's rather than the script's)
Apply = Callable[[dict[str, Any], str, str, bool], None]


def collect_job(
    args: SubmitArgs, base_environment: Mapping[str, str], apply: Apply
) -> tuple[dict[str, Any], dict[str, str]]:
    """What every REST body is built from: ``apply`` the script's ``#SBATCH`` lines, the working
    directory, then the service's options on top (as sbatch's command line overrides the script),
    and the job's environment: ``base_environment`` (what sbatch's own environment would add: PATH,
    locale) overridden by the request's variables.
    """
    try:
        directives = parse_directives(args.script)
    except ScriptError as exc:
        raise refused(f"cannot read the script's #SBATCH lines: {exc}") from exc
    job: dict[str, Any] = {}
    for name, value in directives.items():
        apply(job, name, value, False)
    if args.working_directory:
        job["current_working_directory"] = args.working_directory
    for name, value in _option_pairs(args.options):
        apply(job, name, value, True)
    environment = {**base_environment, **args.environment}
    if not environment:
        raise refused("slurmrestd needs a non-empty job environment")
    return job, environment


def job_description(args: SubmitArgs, base_environment: Mapping[str, str]) -> dict[str, Any]:
    """The ``POST /slurm/v0.0.38/job/submit`` body for ``args``.

    Raises SlurmError naming the first option v0.0.38 cannot express.
    """
    job, environment = collect_job(
        args, base_environment, lambda job, name, value, ours: _apply(job, name, value, from_service=ours)
    )
    job["environment"] = environment
    return {"script": args.script, "job": job}
