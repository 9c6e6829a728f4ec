"""How a job record's columns are encoded, shared by both stores so they decode rows alike.

The observed fields change together on every poll and live in one JSON column; an event keeps the
whole row (without the spec) as one JSON document, so a reader decodes it like a list() row. The
spec is a versioned JSON document (UTF-8) of the fields that differ from their defaults:
``{"version": 1, "name": ..., "restart_policy": {...}, ...}``; this module is the only writer and
reader of that form.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Protocol

from clusterd.model.causes import Cause
from clusterd.model.spec import JobSpec, PlacementPolicy, PlacementPreference, RestartPolicy
from clusterd.slurm.types import JobState
from clusterd.store.records import ArrayTask, JobRecord, Phase, RestartEntry

OBSERVED = (
    "name",
    "reason",
    "nodes",
    "partition",
    "exit_code",
    "exit_signal",
    "submit_time",
    "start_time",
    "end_time",
    "restart_count",
    "final_reason",
    "checkpoint_step",
    "excluded_nodes",
    "placement_explanation",
    "error",
    "user_cancelled",
    "acked_restarts",
    "final_cause",
    "needs_release",
    "backoff_seconds",
    "array",
    "array_tasks",
    "heartbeat_token_sha256",
    "first_start",
    "first_step_time",
    "final_save_stall",
)
_TUPLES = ("nodes", "excluded_nodes")


class Row(Protocol):
    """A row by column name: a SQLAlchemy row mapping or a decoded JSON object."""

    def __getitem__(self, key: str, /) -> Any: ...


SPEC_VERSION = 1
_EMPTY_SPEC = JobSpec()


def _changed(value: Any) -> dict[str, Any]:
    """A frozen dataclass's fields that differ from their defaults, as JSON values."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        v = getattr(value, f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if v == default:
            continue
        if dataclasses.is_dataclass(v):
            v = _changed(v)
        elif isinstance(v, tuple):
            v = list(v)
        elif isinstance(v, Mapping):
            v = dict(v)
        out[f.name] = v
    return out


def spec_bytes(spec: JobSpec) -> bytes:
    """The stored form of ``spec`` (what the store's spec column holds, and its size counts)."""
    doc = {"version": SPEC_VERSION, **_changed(spec)}
    return json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


def spec_from(blob: bytes) -> JobSpec:
    """The spec :func:`spec_bytes` stored; ValueError for anything else (not that JSON, another
    version, a field or placement policy this release does not know)."""
    try:
        doc = json.loads(blob)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a stored spec: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != SPEC_VERSION:
        version = doc.get("version") if isinstance(doc, dict) else None
        raise ValueError(f"stored spec version {version!r} is not {SPEC_VERSION}")
    fields = {k: v for k, v in doc.items() if k != "version"}
    try:
        if "restart_policy" in fields:
            fields["restart_policy"] = RestartPolicy(**fields["restart_policy"])
        if "placement" in fields:
            placement = dict(fields["placement"])
            if "policy" in placement:
                placement["policy"] = PlacementPolicy(placement["policy"])
            fields["placement"] = PlacementPreference(**placement)
        return JobSpec(**fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a stored spec: {exc}") from None


def superseded_reason(job_id: str) -> str:
    """The final reason a record gets when Slurm gave its job id to a newer job."""
    return f"Slurm gave job id {job_id} to a newer job (slurmctld lost its state); what became of this one is unknown"


def observed(rec: JobRecord) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name in OBSERVED:
        value = getattr(rec, name)
        if name == "array_tasks":
            value = {str(i): t.to_json() for i, t in sorted(value.items())}
        elif name == "final_cause":
            value = value.value if value is not None else ""
        data[name] = list(value) if isinstance(value, tuple) else value
    return data


def restart_json(entry: RestartEntry) -> dict[str, Any]:
    return {
        "cause": entry.cause.value,
        "nodes": list(entry.failed_nodes),
        "time": entry.time,
        "step": entry.checkpoint_step,
        "exit_code": entry.exit_code,
        "detail": entry.detail,
        "nodes_before": entry.nodes_before,
        "nodes_after": entry.nodes_after,
        "detected_by": entry.detected_by,
        "phases": dict(entry.phases),
    }


def restart_from(row: Row) -> RestartEntry:
    """A restart from a table row (nodes and phases JSON text) or from :func:`restart_json`."""
    nodes, phases = row["nodes"], row["phases"]
    return RestartEntry(
        Cause(row["cause"]),
        tuple(json.loads(nodes) if isinstance(nodes, str) else nodes),
        row["time"],
        row["step"],
        row["exit_code"],
        row["detail"],
        row["nodes_before"],
        row["nodes_after"],
        row["detected_by"],
        json.loads(phases) if isinstance(phases, str) else dict(phases),
    )


def record_from(
    row: Row, obs: Mapping[str, Any], restarts: list[RestartEntry], spec: JobSpec | None = None
) -> JobRecord:
    """A record from its row columns and decoded observed fields (``spec`` None: compact, empty)."""
    rec = JobRecord(
        record_id=int(row["record_id"]),
        user=row["user"],
        request_id=row["request_id"],
        spec=spec if spec is not None else _EMPTY_SPEC,
        phase=Phase(row["phase"]),
        created=float(row["created"]),
        job_id=row["job_id"] or "",
        terminal=bool(row["terminal"]),
        superseded=bool(row["superseded"]),
        tasks=int(row["tasks"]),
        restarts=restarts,
    )
    for name, value in obs.items():
        if name == "array_tasks":
            rec.array_tasks = {int(i): ArrayTask.from_json(t) for i, t in value.items()}
        elif name == "final_cause":
            rec.final_cause = Cause(value) if value else None
        elif name in OBSERVED:
            setattr(rec, name, tuple(value) if name in _TUPLES else value)
    rec.state = JobState(row["state"])
    return rec


def event_record_json(rec: JobRecord) -> str:
    """The record as an event keeps it: row fields, observed fields and restarts, no spec."""
    return json.dumps(
        {
            "record_id": rec.record_id,
            "user": rec.user,
            "request_id": rec.request_id,
            "job_id": rec.job_id,
            "phase": rec.phase.value,
            "terminal": rec.terminal,
            "superseded": rec.superseded,
            "state": rec.state.value,
            "tasks": rec.tasks,
            "created": rec.created,
            "observed": observed(rec),
            "restarts": [restart_json(e) for e in rec.restarts],
        },
        sort_keys=True,
    )


def event_record_from(data: str | Mapping[str, Any]) -> JobRecord:
    doc: Mapping[str, Any] = json.loads(data) if isinstance(data, str) else data
    return record_from(doc, doc["observed"], [restart_from(r) for r in doc["restarts"]])


def logged_record(rec: JobRecord) -> JobRecord:
    """``rec`` exactly as the event log gives it back (what a journal that skips the read hands out)."""
    return event_record_from(event_record_json(rec))
