"""How a job record's columns are encoded, shared by both stores so they decode rows alike.

The observed fields change together on every poll and live in one JSON column; an event keeps the
whole row (without the spec) as one JSON document, so a reader decodes it like a list() row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from clusterctl.v1 import jobs_pb2
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
)
_TUPLES = ("nodes", "excluded_nodes")


class Row(Protocol):
    """A row by column name: a SQLAlchemy row mapping or a decoded JSON object."""

    def __getitem__(self, key: str, /) -> Any: ...


def spec_bytes(spec: jobs_pb2.JobSpec) -> bytes:
    """The bytes the specs table keeps for ``spec`` (the store never looks inside them)."""
    return spec.SerializeToString()


def spec_from(blob: bytes) -> jobs_pb2.JobSpec:
    """The spec that :func:`spec_bytes` wrote."""
    return jobs_pb2.JobSpec.FromString(blob)


def superseded_reason(job_id: str) -> str:
    """The final reason a record gets when Slurm gave its job id to a newer job."""
    return f"Slurm gave job id {job_id} to a newer job (slurmctld lost its state); what became of this one is unknown"


def observed(rec: JobRecord) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name in OBSERVED:
        value = getattr(rec, name)
        if name == "array_tasks":
            value = {str(i): t.to_json() for i, t in sorted(value.items())}
        data[name] = list(value) if isinstance(value, tuple) else value
    return data


def observed_json(rec: JobRecord) -> str:
    return json.dumps(observed(rec), sort_keys=True)


def restart_json(entry: RestartEntry) -> dict[str, Any]:
    return {
        "cause": entry.cause,
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
        row["cause"],
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
    row: Row, obs: Mapping[str, Any], restarts: list[RestartEntry], spec: jobs_pb2.JobSpec | None = None
) -> JobRecord:
    """A record from its row columns and decoded observed fields (``spec`` None: compact, empty)."""
    rec = JobRecord(
        record_id=int(row["record_id"]),
        user=row["user"],
        request_id=row["request_id"],
        spec=spec if spec is not None else jobs_pb2.JobSpec(),
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
