"""Pure parsers of Slurm's JSON, for every shape Slurm has printed since 22.05.

Two families, told apart by the data itself (never only by a version string):

* Slurm 22.05 (``openapi/v0.0.38``, what Debian 12 ships; captures in tests/fixtures/slurm):
  plain numbers, ``job_state`` a string, ``exit_code`` the raw wait(2) status, and ``sinfo --json``
  a flat ``"nodes"`` list with ``state`` + ``state_flags``.
* Slurm 23.02+ (``data_parser/v0.0.39`` ... ``v0.0.45`` in 26.05): numbers that may be unset or
  infinite become ``{"set", "infinite", "number"}``, states become lists (``["PENDING",
  "REQUEUED"]``), ``exit_code`` becomes ``{"status", "return_code", "signal"}``, and ``sinfo --json``
  prints ``"sinfo"``: one record per partition and node-state group with nested ``nodes``,
  ``cpus``, ``memory``, ``gres``, ``reason`` objects. slurmrestd's ``/nodes`` and ``scontrol show
  nodes --json`` keep one flat record per node in the new value types.

Slurm's state strings become enums here and nowhere else. 22.05 ignores squeue/sinfo
filters with --json, so callers always get the whole queue and filter client-side.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from clusterctl.hostlist import expand_hostlist
from clusterd.slurm.types import JobState, NodeState, SlurmJob, SlurmNode
from clusterd.slurm.version import SlurmVersion, SlurmVersionError

_JOB_STATES = {s.value: s for s in JobState}
# Base states win over flags when a newer Slurm lists both (["PENDING", "REQUEUED"]).
_JOB_FLAG_STATES = frozenset({JobState.REQUEUED, JobState.COMPLETING})
_NODE_BASE_STATES = frozenset(
    {"IDLE", "MIXED", "ALLOCATED", "DOWN", "ERROR", "FUTURE", "UNKNOWN", "RESERVED", "COMPLETING"}
)
_GRES_GPU_RE = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")


class SlurmParseError(ValueError):
    pass


class SlurmReportedErrors(SlurmParseError):
    """Well-formed output whose ``errors`` list is not empty: Slurm could not load what was asked.

    For a whole-queue read that means the controller did not answer (22.05's squeue exits 0 with
    ``"Failed while looking for jobs"`` then): the caller treats it as Slurm being unavailable.
    """


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmParseError(f"{what}: not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SlurmParseError(f"{what}: expected a JSON object")
    return data


def _check(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise SlurmParseError(f"{what}: expected a JSON object")
    errors = data.get("errors") or []
    if errors:
        raise SlurmReportedErrors(f"{what}: Slurm reported errors: {errors}")
    return data


def _number(value: Any) -> int | None:
    """22.05 gives plain ints; newer APIs give {"set": bool, "infinite": bool, "number": N}.

    Unset and infinite both come back as None: to this service an infinite end time or an unset
    restart count carries no number to act on.
    """
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _time(value: Any) -> float | None:
    n = _number(value)
    return float(n) if n else None


def expand_nodes(value: Any) -> tuple[str, ...]:
    """A hostlist string (``node[2-3]``), a comma list, or a JSON list of names/hostlists."""
    if not value:
        return ()
    if isinstance(value, list):
        out: list[str] = []
        for item in value:
            out.extend(expand_hostlist(str(item)))
        return tuple(out)
    return tuple(expand_hostlist(str(value)))


def _csv(value: Any) -> tuple[str, ...]:
    """22.05 prints features as ``"a,b"``; newer APIs print ``["a", "b"]``."""
    if not value:
        return ()
    items = value if isinstance(value, list) else str(value).split(",")
    return tuple(s for s in (str(i).strip() for i in items) if s)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def reason_text(raw: Any) -> str:
    text = _text(raw)
    return "" if text == "None" else text


def job_state(raw: Any) -> JobState:
    """``"RUNNING"`` (22.05) or ``["PENDING", "REQUEUED"]`` (newer) -> enum; a base state beats a flag."""
    names = raw if isinstance(raw, list) else [raw]
    known = [s for s in (_JOB_STATES.get(str(n).upper()) for n in names) if s is not None]
    for state in known:
        if state not in _JOB_FLAG_STATES:
            return state
    return known[0] if known else JobState.UNKNOWN


def _exit(raw: Any) -> tuple[int, int]:
    """(exit code, signal). 22.05 reports the wait(2) status: code in the high byte, signal in the low bits."""
    if isinstance(raw, dict):  # newer: {"status": [...], "return_code": {...}, "signal": {"id": {...}, ...}}
        code = _number(raw.get("return_code")) or 0
        signal = raw.get("signal")
        sig = _number(signal.get("id")) if isinstance(signal, dict) else None
        return code, sig or 0
    status = _number(raw) or 0
    return (status >> 8) & 0xFF, status & 0x7F


def _array(j: dict[str, Any]) -> tuple[str, int | None, str]:
    """(array id, task id, pending task string) of an array element; ("", None, "") otherwise.

    22.05 prints ``array_job_id`` 0 for plain jobs and ``array_task_id`` null on the pending
    range; newer Slurm wraps both in ``{"set", "number"}`` (unset on plain jobs).
    """
    array_id = _number(j.get("array_job_id")) or 0
    if not array_id:
        return "", None, ""
    task = j.get("array_task_id")
    task_id = _number(task) if task is not None else None
    pending = _text(j.get("array_task_string")) if task_id is None else ""
    return str(array_id), task_id, pending


def _job(j: dict[str, Any]) -> SlurmJob:
    code, sig = _exit(j.get("exit_code"))
    array_id, task_id, pending = _array(j)
    return SlurmJob(
        array_job_id=array_id,
        array_task_id=task_id,
        array_pending=pending,
        job_id=str(_number(j["job_id"]) if isinstance(j["job_id"], dict) else j["job_id"]),
        name=_text(j.get("name")),
        user=_text(j.get("user_name")),
        state=job_state(j.get("job_state")),
        reason=reason_text(j.get("state_reason")),
        nodes=expand_nodes(j.get("nodes")),
        partition=_text(j.get("partition")),
        exit_code=code,
        exit_signal=sig,
        submit_time=_time(j.get("submit_time")),
        start_time=_time(j.get("start_time")),
        end_time=_time(j.get("end_time")),
        restart_count=_number(j.get("restart_cnt")) or 0,
        excluded_nodes=expand_nodes(j.get("excluded_nodes")),
        requeue=bool(j.get("requeue", False)),
        comment=_text(j.get("comment")),
        batch_host=_text(j.get("batch_host")),
        stdout=_text(j.get("standard_output")),
        stderr=_text(j.get("standard_error")),
        working_directory=_text(j.get("current_working_directory")),
    )


def parse_squeue_data(data: dict[str, Any]) -> list[SlurmJob]:
    """Jobs from a decoded ``squeue --json`` / slurmrestd ``GET /jobs`` response, any version."""
    data = _check(data, "squeue --json")
    jobs = data.get("jobs") or []
    if not isinstance(jobs, list):
        raise SlurmParseError("squeue --json: 'jobs' is not a list")
    try:
        return [_job(j) for j in jobs]
    except (KeyError, TypeError, AttributeError) as exc:
        raise SlurmParseError(f"squeue --json: malformed job record: {exc!r}") from exc


def parse_squeue(text: str) -> list[SlurmJob]:
    return parse_squeue_data(_load(text, "squeue --json"))


def parse_jobs_since(text: str, *, asked_since: bool) -> tuple[list[SlurmJob] | None, int]:
    """A slurmrestd ``GET jobs`` reply: (jobs, its ``last_update``; 0 where the API has none), or
    (None, 0) when it answers ``update_time`` with no change: no jobs and an unset ``last_update``
    (seen on 24.11's v0.0.42, with the warning "No job changes since update_time").

    Only data_parser versions (23.11 on) carry ``last_update``; the caller asks with ``update_time``
    only after a reply that had one, so an empty 22.05 reply is never taken for "no change".
    """
    data = _check(_load(text, "GET jobs"), "GET jobs")
    stamp = _number(data.get("last_update")) or 0
    if asked_since and not stamp and not data.get("jobs"):
        return None, 0
    return parse_squeue_data(data), stamp


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


def _split_state(raw: Any, extra_flags: Any = None) -> tuple[str, list[str]]:
    """``"idle"`` + ``["DRAIN"]`` (22.05) or ``["IDLE", "DRAIN"]`` (newer) -> ("IDLE", ["DRAIN"])."""
    flags = [str(f) for f in (extra_flags or [])]
    if isinstance(raw, list):
        names = [str(s) for s in raw]
        at = next((i for i, s in enumerate(names) if s.upper() in _NODE_BASE_STATES), 0)
        base = names[at] if names else "UNKNOWN"
        return base, names[:at] + names[at + 1 :] + flags
    return str(raw or "unknown"), flags


def gres_gpus(gres: str) -> int:
    """GPU count from a GRES string: ``gpu:4``, ``gpu:a100:4(S:0)``, ``gpu:2(IDX:0-1)``."""
    return sum(int(m.group(1)) for m in _GRES_GPU_RE.finditer(gres or ""))


def _flat_node(n: dict[str, Any]) -> SlurmNode:
    """One node record: 22.05 ``sinfo --json``, or slurmrestd ``/nodes`` / ``scontrol show nodes --json``."""
    base, flags = _split_state(n.get("state"), n.get("state_flags"))
    return SlurmNode(
        name=str(n["name"]),
        state=node_state(base, flags),
        cpus_total=_number(n.get("cpus")) or 0,
        cpus_allocated=_number(n.get("alloc_cpus")) or 0,
        gpus_total=gres_gpus(_text(n.get("gres"))),
        gpus_allocated=gres_gpus(_text(n.get("gres_used"))),
        memory_mb_total=_number(n.get("real_memory")) or 0,
        memory_mb_allocated=_number(n.get("alloc_memory")) or 0,
        partitions=_csv(n.get("partitions")),
        features=_csv(n.get("active_features") or n.get("features")),
        reason=_text(n.get("reason")),
        flags=tuple(flags),
        address=_text(n.get("address")),
        port=_number(n.get("port")) or 0,
        slurmd_started=float(_number(n.get("slurmd_start_time")) or 0),
    )


def _sub(record: dict[str, Any], *path: str) -> Any:
    value: Any = record
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _group_nodes(g: dict[str, Any]) -> list[SlurmNode]:
    """One ``sinfo`` record (23.02+): a partition x state group of nodes with group-wide figures.

    Per-node sizes come from the group's maximum (the minimum equals it when Slurm grouped identical
    nodes); allocated CPUs and memory are the group's totals, spread evenly over its nodes. That is
    exact for a one-node group and for identical nodes; slurmrestd's ``/nodes`` is exact always.
    """
    names = expand_nodes(_sub(g, "nodes", "nodes"))
    if not names:
        return []
    count = len(names)
    base, flags = _split_state(_sub(g, "node", "state"))
    partition = _sub(g, "partition", "name") if isinstance(g.get("partition"), dict) else g.get("partition")
    reason = _sub(g, "reason", "description") if isinstance(g.get("reason"), dict) else g.get("reason")
    features = _sub(g, "features", "active") or _sub(g, "features", "total")
    per_node_cpus = _number(_sub(g, "cpus", "maximum")) or (_number(_sub(g, "cpus", "total")) or 0) // count
    per_node_mem = _number(_sub(g, "memory", "maximum")) or 0
    return [
        SlurmNode(
            name=name,
            state=node_state(base, flags),
            cpus_total=per_node_cpus,
            cpus_allocated=(_number(_sub(g, "cpus", "allocated")) or 0) // count,
            gpus_total=gres_gpus(_text(_sub(g, "gres", "total"))),
            gpus_allocated=gres_gpus(_text(_sub(g, "gres", "used"))),
            memory_mb_total=per_node_mem,
            memory_mb_allocated=(_number(_sub(g, "memory", "allocated")) or 0) // count,
            partitions=(str(partition).rstrip("*"),) if partition else (),
            features=_csv(features),
            reason=_text(reason),
            flags=tuple(flags),
        )
        for name in names
    ]


def _merge(nodes: list[SlurmNode]) -> list[SlurmNode]:
    """A node listed under several partitions is one node: keep the first record, union partitions."""
    merged: dict[str, SlurmNode] = {}
    for node in nodes:
        seen = merged.get(node.name)
        if seen is None:
            merged[node.name] = node
            continue
        extra = tuple(p for p in node.partitions if p not in seen.partitions)
        if extra:
            merged[node.name] = replace(seen, partitions=seen.partitions + extra)
    return list(merged.values())


def parse_sinfo_data(data: dict[str, Any]) -> list[SlurmNode]:
    """Nodes from a decoded ``sinfo --json`` (22.05 flat or 23.02+ grouped) or slurmrestd ``/nodes``."""
    data = _check(data, "sinfo --json")
    try:
        if isinstance(data.get("sinfo"), list):
            grouped: list[SlurmNode] = []
            for g in data["sinfo"]:
                if not isinstance(g, dict):
                    raise SlurmParseError(f"sinfo --json: 'sinfo' record is not an object: {g!r:.80}")
                grouped.extend(_group_nodes(g))
            return _merge(grouped)
        nodes = data.get("nodes") or []
        if not isinstance(nodes, list):
            raise SlurmParseError("sinfo --json: 'nodes' is not a list")
        return _merge([_flat_node(n) for n in nodes])
    except (KeyError, TypeError, AttributeError) as exc:
        raise SlurmParseError(f"sinfo --json: malformed node record: {exc!r}") from exc


def parse_sinfo(text: str) -> list[SlurmNode]:
    return parse_sinfo_data(_load(text, "sinfo --json"))


def parse_nodes_since(text: str, *, asked_since: bool) -> tuple[list[SlurmNode] | None, int]:
    """A slurmrestd ``GET nodes`` reply: (nodes, its ``last_update``; 0 where the API has none), or
    (None, 0) for "no change" asked with ``update_time``: no nodes and an unset ``last_update`` (a
    cluster always has nodes). 26.05 answers that with 304 and no body, which the caller handles.
    """
    data = _check(_load(text, "GET nodes"), "GET nodes")
    stamp = _number(data.get("last_update")) or 0
    if asked_since and not stamp and not data.get("nodes"):
        return None, 0
    return parse_sinfo_data(data), stamp


def parse_partitions(text: str) -> list[str]:
    """``scontrol show partition --oneliner``: ``PartitionName=debug ...`` per line."""
    out = []
    for line in text.splitlines():
        m = re.match(r"PartitionName=(\S+)", line.strip())
        if m:
            out.append(m.group(1))
    return out


def parse_version(text: str) -> str:
    """``sbatch --version`` -> ``"22.05.8"`` (see :class:`SlurmVersion` for comparisons)."""
    try:
        return str(SlurmVersion.parse(text))
    except SlurmVersionError as exc:
        raise SlurmParseError(str(exc)) from exc
