"""Specs stored by earlier releases (serialized clusterctl.v1 JobSpec messages) re-encoded as the
store's JSON form (:mod:`clusterd.store.codec`).

The only reader of that old form: revision v0003 runs it once, inside the upgrade's transaction,
and a spec it cannot read stops the upgrade (:class:`MigrationError` naming the record), so nothing
is half converted and no record silently loses its spec.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from google.protobuf.message import DecodeError
from sqlalchemy import Connection, text

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.model.spec import JobSpec, PlacementPolicy, PlacementPreference, RestartPolicy
from clusterd.store import codec
from clusterd.store.migrations import MigrationError

_POLICIES = {
    cluster_pb2.PLACEMENT_POLICY_UNSPECIFIED: PlacementPolicy.UNSPECIFIED,
    cluster_pb2.PLACEMENT_POLICY_PACK: PlacementPolicy.PACK,
    cluster_pb2.PLACEMENT_POLICY_ANY: PlacementPolicy.ANY,
    cluster_pb2.PLACEMENT_POLICY_EXACT: PlacementPolicy.EXACT,
}
_DURATIONS = {
    "backoff_seconds": "backoff",
    "heartbeat_interval_seconds": "heartbeat_interval",
    "hang_timeout_seconds": "hang_timeout",
}


def _restart_policy(p: jobs_pb2.RestartPolicy) -> RestartPolicy:
    values: dict[str, Any] = {}
    for name in RestartPolicy.__dataclass_fields__:
        wire = _DURATIONS.get(name, name)
        if name.endswith("_exit_codes"):
            values[name] = tuple(getattr(p, wire))
        elif p.HasField(wire):
            d = getattr(p, wire)
            values[name] = d.seconds + d.nanos / 1e9 if name in _DURATIONS else d
    return RestartPolicy(**values)


def _placement(p: cluster_pb2.PlacementPreference) -> PlacementPreference:
    if p.policy not in _POLICIES:
        raise ValueError(f"unknown placement policy {p.policy}")
    lists = (tuple(p.exclude_nodes), tuple(p.nodelist), tuple(p.constraints))
    return PlacementPreference(_POLICIES[p.policy], p.max_wait_seconds, p.switch_count, *lists)


def legacy_spec(p: jobs_pb2.JobSpec) -> JobSpec:
    """The model of a JobSpec message as earlier releases stored it."""
    values: dict[str, Any] = {}
    for name in JobSpec.__dataclass_fields__:
        if name == "restart_policy":
            values[name] = _restart_policy(p.restart_policy)
        elif name == "placement":
            values[name] = _placement(p.placement)
        elif name == "export":
            values[name] = p.export if p.HasField("export") else None
        elif name == "environment":
            values[name] = dict(p.environment)
        elif name in ("command", "sbatch_options"):
            values[name] = tuple(getattr(p, name))
        else:
            values[name] = getattr(p, name)
    return JobSpec(**values)


def reencode(spec_bytes: bytes) -> bytes:
    """A stored spec in the current form: a serialized JobSpec converted, a current one as it is.

    ValueError when it is neither.
    """
    try:
        codec.spec_from(spec_bytes)
        return spec_bytes
    except ValueError:
        pass
    try:
        message = jobs_pb2.JobSpec.FromString(spec_bytes)
    except DecodeError as exc:
        raise ValueError(f"not a serialized JobSpec: {exc}") from None
    return codec.spec_bytes(legacy_spec(message))


def _converted(rows: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
    for record_id, blob in rows:
        try:
            yield record_id, reencode(blob)
        except ValueError as exc:
            why = f"record {record_id}: its stored spec cannot be read ({exc})"
            raise MigrationError(f"{why}; the upgrade stopped, the database is unchanged") from None


_BATCH = 500  # records re-encoded per statement round trip


def reencode_all(conn: Connection) -> None:
    """Re-encode every stored spec in batches of record ids, inside the upgrade's transaction; the
    record's ``spec_bytes`` follows its new size."""
    after = -1
    while True:
        rows = conn.execute(
            text("SELECT record_id, spec FROM specs WHERE record_id > :after ORDER BY record_id LIMIT :n"),
            {"after": after, "n": _BATCH},
        ).all()
        if not rows:
            return
        after = int(rows[-1][0])
        done = [{"id": i, "spec": blob, "n": len(blob)} for i, blob in _converted((int(r), bytes(b)) for r, b in rows)]
        conn.execute(text("UPDATE specs SET spec = :spec WHERE record_id = :id"), done)
        conn.execute(text("UPDATE jobs SET spec_bytes = :n WHERE record_id = :id"), done)
