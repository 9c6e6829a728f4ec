"""Restart rows keep the node counts before and after the restart; older databases gain the columns."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from clusterd.model.causes import Cause
from clusterd.model.spec import JobSpec
from clusterd.store import schema
from clusterd.store.records import Phase, RestartEntry
from clusterd.store.sqlite import SqliteJobStore


async def _restarted_record(path: Path) -> int:
    store = SqliteJobStore(path)
    try:
        rec, _ = await store.reserve("alice", "r", JobSpec(command=["x"], nodes=2, max_nodes=3))
        rec.phase, rec.job_id = Phase.SUBMITTED, "5"
        await store.save(rec)
        await store.record_restart(rec, RestartEntry(Cause.NODE_FAILURE, ("n3",), 1.0, 4, detail="d", nodes_before=3))
        await store.amend_last_restart(
            rec, RestartEntry(Cause.NODE_FAILURE, ("n3",), 1.0, 4, detail="d; resumed", nodes_before=3, nodes_after=2)
        )
        return rec.record_id
    finally:
        await store.close()


async def test_amended_restart_is_read_back(tmp_path: Path) -> None:
    record_id = await _restarted_record(tmp_path / "db.sqlite3")
    store = SqliteJobStore(tmp_path / "db.sqlite3")
    try:
        rec = await store.get_by_record(record_id)
        assert rec is not None
        (entry,) = rec.restarts
        assert (entry.nodes_before, entry.nodes_after, entry.detail) == (3, 2, "d; resumed")
    finally:
        await store.close()


async def test_version_2_restarts_table_gains_the_node_columns(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    record_id = await _restarted_record(path)
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE restarts DROP COLUMN nodes_before")
    db.execute("ALTER TABLE restarts DROP COLUMN nodes_after")
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()
    store = SqliteJobStore(path)
    try:
        assert store._db.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        rec = await store.get_by_record(record_id)
        assert rec is not None
        (entry,) = rec.restarts
        assert (entry.nodes_before, entry.nodes_after, entry.failed_nodes) == (0, 0, ("n3",))
    finally:
        await store.close()
