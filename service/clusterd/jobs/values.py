"""sbatch option values read into typed form (pure). Each raises ValueError with a short reason.

One reader per value syntax, shared by the JobSpec fields and the ``#SBATCH`` lines, so the two
ways of asking for the same thing mean the same.
"""

from __future__ import annotations

import re

from clusterctl.sbatch.values import (
    array_indices,
    count,
    gpus,
    gres_gpus,
    megabytes,
    node_range,
    non_negative,
    time_limit,
)
from clusterd.slurm.request import ArraySpec, Export, ExportMode, Signal, Switches, parse_time_limit

__all__ = [
    "count",
    "gpus",
    "gres_gpus",
    "megabytes",
    "node_range",
    "non_negative",
    "time_limit",
]  # sbatch's own value syntax

_SIGNAL_RE = re.compile(r"(?:(?P<flags>[RB]+):)?(?:SIG)?(?P<sig>[A-Z0-9]+)(?:@(?P<time>[0-9]+))?\Z", re.IGNORECASE)
_SIGNALS = frozenset(
    [
        "HUP",
        "INT",
        "QUIT",
        "ABRT",
        "KILL",
        "ALRM",
        "TERM",
        "USR1",
        "USR2",
        "URG",
        "CONT",
        "STOP",
        "TSTP",
        "TTIN",
        "TTOU",
        "XCPU",
    ]
)
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


def signal(text: str) -> Signal:
    """``[R|B:]SIG[@SECONDS]`` (60 s by default, as sbatch)."""
    m = _SIGNAL_RE.match(text)
    if not m or (m.group("sig").upper() not in _SIGNALS and not m.group("sig").isdigit()):
        raise ValueError(f"cannot read signal {text[:40]!r}: use [B:]SIGNAL[@SECONDS]")
    flags = (m.group("flags") or "").upper()
    seconds = int(m.group("time")) if m.group("time") else 60
    if seconds > 0xFFFF:
        raise ValueError("the warning time must be at most 65535 seconds")
    return Signal(m.group("sig").upper(), seconds, batch_only="B" in flags, reservation_end="R" in flags)


def switches(text: str) -> Switches:
    """``COUNT[@WAIT]`` with WAIT in Slurm's time syntax."""
    number, at, wait = text.partition("@")
    seconds = None
    if at:
        try:
            seconds = parse_time_limit(wait)
        except ValueError:
            raise ValueError(f"{text[:40]!r}: the wait after '@' must be a time such as 30, 10:00 or 1-0") from None
        if seconds is None:
            raise ValueError(f"{text!r}: the wait must be finite")
    return Switches(count(number), seconds)


def array(text: str, limit: int) -> ArraySpec:
    """``0-9``, ``1,3,5``, ``0-15:4``, optionally ``%N``; at most ``limit`` tasks, indices below 4M."""
    indices, max_running = array_indices(text, limit)
    return ArraySpec(indices, max_running)


def export(text: str, environment: dict[str, str]) -> Export:
    """``ALL``, ``NONE`` or ``[ALL,]NAME[=value],...``; named values come from ``environment``."""
    items = [i for i in text.split(",") if i]
    if not items:
        raise ValueError("--export needs ALL, NONE or a list of variable names")
    head = items[0].upper()
    if head == "NONE" and len(items) == 1:
        return Export(ExportMode.NONE, {})
    mode = ExportMode.LIST
    if head == "ALL":
        mode, items = ExportMode.ALL, items[1:]
    variables = dict(environment) if mode is ExportMode.ALL else {}
    for item in items:
        name, eq, value = item.partition("=")
        if not _ENV_NAME_RE.match(name) or name.upper() in ("ALL", "NONE"):
            raise ValueError(f"bad variable name {name[:64]!r} in --export")
        if eq:
            variables[name] = value
        elif name in environment:
            variables[name] = environment[name]
    return Export(mode, variables)


def env_name_ok(name: str) -> bool:
    """Whether ``name`` is an environment variable name Slurm and the shell both accept."""
    return bool(_ENV_NAME_RE.match(name))
