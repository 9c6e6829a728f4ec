"""Restart rows keep the node counts before and after the restart, across a reopen."""

from __future__ import annotations

from pathlib import Path

from clusterd.model.causes import Cause
from clusterd.model.spec import JobSpec
from clusterd.store.records import Phase, RestartEntry
from clusterd.store.store import sqlite_store


async def _restarted_record(path: Path) -> int:
    store = sqlite_store(path)
    await store.open()
    try:
        rec, _ = await store.jobs.reserve("alice", "r", JobSpec(command=["x"], nodes=2, max_nodes=3))
        rec.phase, rec.job_id = Phase.SUBMITTED, "5"
        await store.jobs.save(rec)
        await store.jobs.record_restart(
            rec, RestartEntry(Cause.NODE_FAILURE, ("n3",), 1.0, 4, detail="d", nodes_before=3)
        )
        await store.jobs.amend_last_restart(
            rec, RestartEntry(Cause.NODE_FAILURE, ("n3",), 1.0, 4, detail="d; resumed", nodes_before=3, nodes_after=2)
        )
        return rec.record_id
    finally:
        await store.close()


async def test_amended_restart_is_read_back(tmp_path: Path) -> None:
    record_id = await _restarted_record(tmp_path / "db.sqlite3")
    store = sqlite_store(tmp_path / "db.sqlite3")
    await store.open()
    try:
        rec = await store.jobs.get_by_record(record_id)
        assert rec is not None
        (entry,) = rec.restarts
        assert (entry.nodes_before, entry.nodes_after, entry.detail) == (3, 2, "d; resumed")
    finally:
        await store.close()
