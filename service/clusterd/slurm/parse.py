"""Pure parsers of Slurm's JSON output (22.05 shape, API v0.0.38), tested against captured output.

Slurm's state strings become enums here and nowhere else (STYLE 5). 22.05 ignores squeue/sinfo
filters with --json, so callers always get the whole queue and filter client-side.
"""

from __future__ import annotations

import json
import re
from typing import Any

from clusterctl.hostlist import expand_hostlist
from clusterd.slurm.types import JobState, NodeState, SlurmJob, SlurmNode

_JOB_STATES = {s.value: s for s in JobState}
_GRES_GPU_RE = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")


class SlurmParseError(ValueError):
    pass


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmParseError(f"{what}: not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SlurmParseError(f"{what}: expected a JSON object")
    errors = data.get("errors") or []
    if errors:
        raise SlurmParseError(f"{what}: Slurm reported errors: {errors}")
    return data


def _number(value: Any) -> int | None:
    """22.05 gives plain ints; newer APIs give {"set": bool, "infinite": bool, "number": N}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    return None


def _time(value: Any) -> float | None:
    n = _number(value)
    return float(n) if n else None


def _hosts(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return tuple(expand_hostlist(str(value)))


def _reason(raw: Any) -> str:
    text = str(raw or "")
    return "" if text == "None" else text


def job_state(raw: Any) -> JobState:
    """``"RUNNING"`` (22.05) or ``["RUNNING", "COMPLETING"]`` (newer) -> enum; first base state wins."""
    names = raw if isinstance(raw, list) else [raw]
    for name in names:
        state = _JOB_STATES.get(str(name).upper())
        if state is not None:
            return state
    return JobState.UNKNOWN


def _exit(raw: Any) -> tuple[int, int]:
    """22.05 reports the wait(2) status: exit code in the high byte, signal in the low bits."""
    if isinstance(raw, dict):  # newer: {"status": [...], "return_code": {...}, "signal": {...}}
        code = _number(raw.get("return_code")) or 0
        sig = _number((raw.get("signal") or {}).get("id")) or 0
        return code, sig
    status = _number(raw) or 0
    return (status >> 8) & 0xFF, status & 0x7F


def parse_squeue(text: str) -> list[SlurmJob]:
    data = _load(text, "squeue --json")
    jobs: list[SlurmJob] = []
    for j in data.get("jobs", []):
        code, sig = _exit(j.get("exit_code"))
        jobs.append(
            SlurmJob(
                job_id=str(j["job_id"]),
                name=str(j.get("name", "")),
                user=str(j.get("user_name", "")),
                state=job_state(j.get("job_state")),
                reason=_reason(j.get("state_reason")),
                nodes=_hosts(j.get("nodes")),
                partition=str(j.get("partition", "")),
                exit_code=code,
                exit_signal=sig,
                submit_time=_time(j.get("submit_time")),
                start_time=_time(j.get("start_time")),
                end_time=_time(j.get("end_time")),
                restart_count=_number(j.get("restart_cnt")) or 0,
                excluded_nodes=_hosts(j.get("excluded_nodes")),
                requeue=bool(j.get("requeue", False)),
                comment=str(j.get("comment", "") or ""),
                batch_host=str(j.get("batch_host", "") or ""),
            )
        )
    return jobs


def node_state(base: str, flags: list[str]) -> NodeState:
    """Slurm's base state plus flags -> one enum. DRAIN on a busy node is DRAINING."""
    base = base.upper()
    upper = {f.upper() for f in flags}
    if base == "DOWN" or ("NOT_RESPONDING" in upper and base not in ("IDLE", "MIXED", "ALLOCATED")):
        return NodeState.DOWN
    if "DRAIN" in upper:
        return NodeState.DRAINING if base in ("MIXED", "ALLOCATED") else NodeState.DRAINED
    if "RESERVED" in upper or base == "RESERVED":
        return NodeState.RESERVED
    try:
        return NodeState(base)
    except ValueError:
        return NodeState.UNKNOWN


def gres_gpus(gres: str) -> int:
    """GPU count from a GRES string: ``gpu:4``, ``gpu:a100:4(S:0)``, ``gpu:2(IDX:0-1)``."""
    return sum(int(m.group(1)) for m in _GRES_GPU_RE.finditer(gres or ""))


def parse_sinfo(text: str) -> list[SlurmNode]:
    data = _load(text, "sinfo --json")
    nodes: list[SlurmNode] = []
    for n in data.get("nodes", []):
        raw_state = n.get("state", "unknown")
        flags = [str(f) for f in n.get("state_flags", []) or []]
        if isinstance(raw_state, list):  # newer API: ["IDLE", "DRAIN"]
            flags = [str(f) for f in raw_state[1:]] + flags
            raw_state = raw_state[0] if raw_state else "unknown"
        features = str(n.get("active_features") or n.get("features") or "")
        nodes.append(
            SlurmNode(
                name=str(n["name"]),
                state=node_state(str(raw_state), flags),
                cpus_total=_number(n.get("cpus")) or 0,
                cpus_allocated=_number(n.get("alloc_cpus")) or 0,
                gpus_total=gres_gpus(str(n.get("gres", ""))),
                gpus_allocated=gres_gpus(str(n.get("gres_used", ""))),
                memory_mb_total=_number(n.get("real_memory")) or 0,
                memory_mb_allocated=_number(n.get("alloc_memory")) or 0,
                partitions=tuple(n.get("partitions") or ()),
                features=tuple(f for f in features.split(",") if f),
                reason=str(n.get("reason", "") or ""),
                flags=tuple(flags),
            )
        )
    return nodes


def parse_partitions(text: str) -> list[str]:
    """``scontrol show partition --oneliner``: ``PartitionName=debug ...`` per line."""
    out = []
    for line in text.splitlines():
        m = re.match(r"PartitionName=(\S+)", line.strip())
        if m:
            out.append(m.group(1))
    return out


def parse_version(text: str) -> str:
    m = re.search(r"(\d+\.\d+\.\d+)", text)
    if not m:
        raise SlurmParseError(f"cannot read a Slurm version from {text.strip()[:80]!r}")
    return m.group(1)
