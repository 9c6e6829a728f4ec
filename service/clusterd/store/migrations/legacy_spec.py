"""Specs stored by earlier releases (serialized clusterctl.v1 JobSpec messages) re-encoded as the
store's JSON form (:mod:`clusterd.store.codec`).

The only reader of that old form: it runs once, inside the schema upgrade's transaction, and a spec
it cannot read stops the upgrade (:class:`MigrationError` naming the record), so nothing is half
converted and no record silently loses its spec.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.model.spec import JobSpec, PlacementPolicy, PlacementPreference, RestartPolicy
from clusterd.store import codec
from clusterd.store.migrations import MigrationError

if TYPE_CHECKING:  # psycopg is there only where PostgreSQL is configured
    from psycopg import AsyncConnection
    from psycopg.rows import DictRow

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


def reencode_sqlite(db: sqlite3.Connection) -> None:
    """Re-encode every stored spec, inside the caller's transaction (the usage triggers follow spec_bytes)."""
    rows = db.execute("SELECT record_id, spec FROM specs ORDER BY record_id").fetchall()
    for record_id, blob in _converted((int(r), bytes(b)) for r, b in rows):
        db.execute("UPDATE specs SET spec=? WHERE record_id=?", (blob, record_id))
        db.execute("UPDATE jobs SET spec_bytes=? WHERE record_id=?", (len(blob), record_id))


async def reencode_postgres(conn: AsyncConnection[DictRow]) -> None:
    """Re-encode every stored spec, inside the caller's transaction."""
    cur = await conn.execute("SELECT record_id, spec FROM specs ORDER BY record_id")
    rows = [(int(r["record_id"]), bytes(r["spec"])) for r in await cur.fetchall()]
    for record_id, blob in _converted(rows):
        await conn.execute("UPDATE specs SET spec=%s WHERE record_id=%s", (blob, record_id))
        await conn.execute("UPDATE jobs SET spec_bytes=%s WHERE record_id=%s", (len(blob), record_id))
