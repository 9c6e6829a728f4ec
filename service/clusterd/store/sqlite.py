"""SQLite (WAL) store of job records and request ids.

All blocking SQLite work runs through ``asyncio.to_thread`` here and nowhere else (STYLE 8). A
UNIQUE(user, request_id) constraint makes idempotency hold across concurrent calls and restarts:
the database, not an in-memory map, decides which caller submits.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterctl.v1 import jobs_pb2
from clusterd.slurm.types import JobState
from clusterd.store.records import JobRecord, Phase, RestartEntry

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    record_id   INTEGER PRIMARY KEY AUTOINCREMENT,
    user        TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    job_id      TEXT,
    phase       TEXT NOT NULL,
    spec        BLOB NOT NULL,
    observed    TEXT NOT NULL DEFAULT '{}',
    terminal    INTEGER NOT NULL DEFAULT 0,
    created     REAL NOT NULL,
    updated     REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_request ON jobs(user, request_id) WHERE request_id != '';
CREATE UNIQUE INDEX IF NOT EXISTS jobs_job_id ON jobs(job_id) WHERE job_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_live ON jobs(terminal);
CREATE TABLE IF NOT EXISTS restarts (
    record_id   INTEGER NOT NULL REFERENCES jobs(record_id),
    seq         INTEGER NOT NULL,
    cause       TEXT NOT NULL,
    nodes       TEXT NOT NULL,
    time        REAL NOT NULL,
    step        INTEGER NOT NULL,
    exit_code   INTEGER NOT NULL,
    detail      TEXT NOT NULL,
    PRIMARY KEY (record_id, seq)
);
"""

# Observed fields kept as one JSON column: they change together on every poll.
_OBSERVED = (
    "name", "state", "reason", "nodes", "partition", "exit_code", "exit_signal", "submit_time", "start_time",
    "end_time", "restart_count", "final_reason", "checkpoint_step", "excluded_nodes",
    "placement_explanation", "error", "user_cancelled", "acked_restarts", "final_cause",
    "needs_release", "backoff_seconds",
)  # fmt: skip


def _observed_json(rec: JobRecord) -> str:
    data: dict[str, Any] = {}
    for name in _OBSERVED:
        value = getattr(rec, name)
        if isinstance(value, JobState):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        data[name] = value
    return json.dumps(data, sort_keys=True)


@dataclass(frozen=True)
class LiveRow:
    record_id: int
    phase: Phase
    job_id: str
    updated: float


class JobStore:
    """Async facade over one SQLite connection guarded by a lock."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._record_locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()
        self._db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- sync internals (run in a worker thread) --------------------------------------------

    def _row_to_record(self, row: sqlite3.Row) -> JobRecord:
        spec = jobs_pb2.JobSpec()
        spec.ParseFromString(row["spec"])
        rec = JobRecord(
            record_id=row["record_id"],
            user=row["user"],
            request_id=row["request_id"],
            spec=spec,
            phase=Phase(row["phase"]),
            created=row["created"],
            job_id=row["job_id"] or "",
            terminal=bool(row["terminal"]),
        )
        for name, value in json.loads(row["observed"]).items():
            if name == "state":
                value = JobState(value)
            elif name in ("nodes", "excluded_nodes"):
                value = tuple(value)
            setattr(rec, name, value)
        rec.restarts = [
            RestartEntry(r["cause"], tuple(json.loads(r["nodes"])), r["time"], r["step"], r["exit_code"], r["detail"])
            for r in self._db.execute(
                "SELECT * FROM restarts WHERE record_id=? ORDER BY seq", (rec.record_id,)
            ).fetchall()
        ]
        return rec

    def _reserve(self, user: str, request_id: str, spec: bytes) -> tuple[JobRecord, bool]:
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if request_id:
                    row = self._db.execute(
                        "SELECT * FROM jobs WHERE user=? AND request_id=?", (user, request_id)
                    ).fetchone()
                    if row is not None and row["phase"] != Phase.FAILED.value:
                        self._db.execute("COMMIT")
                        return self._row_to_record(row), False
                    if row is not None:  # a failed attempt submitted nothing: this retry may submit
                        self._db.execute("DELETE FROM jobs WHERE record_id=?", (row["record_id"],))
                cur = self._db.execute(
                    "INSERT INTO jobs(user, request_id, phase, spec, created, updated) VALUES (?,?,?,?,?,?)",
                    (user, request_id, Phase.SUBMITTING.value, spec, now, now),
                )
                row = self._db.execute("SELECT * FROM jobs WHERE record_id=?", (cur.lastrowid,)).fetchone()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return self._row_to_record(row), True

    def _update(self, rec: JobRecord) -> None:
        self._db.execute(
            "UPDATE jobs SET job_id=?, phase=?, observed=?, terminal=?, updated=? WHERE record_id=?",
            (rec.job_id or None, rec.phase.value, _observed_json(rec), int(rec.terminal), time.time(), rec.record_id),
        )

    def _save(self, rec: JobRecord) -> None:
        with self._lock:
            self._update(rec)

    def _record_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        """The restart row and the record's new state in ONE transaction: a crash keeps both or neither."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                query = "SELECT COUNT(*) FROM restarts WHERE record_id=?"
                (seq,) = self._db.execute(query, (rec.record_id,)).fetchone()
                self._db.execute(
                    "INSERT INTO restarts VALUES (?,?,?,?,?,?,?,?)",
                    (rec.record_id, seq, entry.cause, json.dumps(list(entry.failed_nodes)), entry.time,
                     entry.checkpoint_step, entry.exit_code, entry.detail),
                )  # fmt: skip
                self._update(rec)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[JobRecord]:
        with self._lock:
            return [self._row_to_record(r) for r in self._db.execute(sql, params).fetchall()]

    # -- async API ---------------------------------------------------------------------------

    def record_lock(self, record_id: int) -> asyncio.Lock:
        """Serializes read-modify-write of one record between the poller and RPC handlers."""
        lock = self._record_locks.get(record_id)
        if lock is None:
            lock = asyncio.Lock()
            self._record_locks[record_id] = lock
        return lock

    async def reserve(self, user: str, request_id: str, spec: jobs_pb2.JobSpec) -> tuple[JobRecord, bool]:
        """Create a SUBMITTING record, or return the live one holding ``(user, request_id)``.

        Returns (record, created). Only the caller that got created=True may run sbatch.
        """
        return await asyncio.to_thread(self._reserve, user, request_id, spec.SerializeToString())

    async def save(self, rec: JobRecord) -> None:
        await asyncio.to_thread(self._save, rec)

    async def record_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        """Append a restart and save the record with it, atomically."""
        await asyncio.to_thread(self._record_restart, rec, entry)
        rec.restarts.append(entry)

    async def get_by_record(self, record_id: int) -> JobRecord | None:
        rows = await asyncio.to_thread(self._query, "SELECT * FROM jobs WHERE record_id=?", (record_id,))
        return rows[0] if rows else None

    async def get_by_job_id(self, job_id: str) -> JobRecord | None:
        rows = await asyncio.to_thread(self._query, "SELECT * FROM jobs WHERE job_id=?", (job_id,))
        return rows[0] if rows else None

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            return [tuple(r) for r in self._db.execute(sql, params).fetchall()]

    async def live(self) -> list[LiveRow]:
        """The records the poller must still follow (not terminal, not failed), without decoding them.

        ``updated`` changes with every save, so the poller can tell a record nobody touched since
        its last look from one an RPC changed; decoding is left to the few it must re-read.
        """
        sql = "SELECT record_id, phase, job_id, updated FROM jobs WHERE terminal=0 AND phase!=? ORDER BY record_id"
        rows = await asyncio.to_thread(self._rows, sql, (Phase.FAILED.value,))
        return [LiveRow(int(rid), Phase(phase), job_id or "", float(updated)) for rid, phase, job_id, updated in rows]

    async def live_count(self, user: str, *, request_id: str = "") -> tuple[int, bool]:
        """(``user``'s submitted unfinished jobs, whether one holds ``request_id``): counted, not decoded."""
        sql = ("SELECT COUNT(*), COALESCE(SUM(request_id=? AND request_id!=''), 0) FROM jobs "
               "WHERE user=? AND phase=? AND terminal=0")  # fmt: skip
        ((count, held),) = await asyncio.to_thread(self._rows, sql, (request_id, user, Phase.SUBMITTED.value))
        return int(count), bool(held)

    async def list(
        self, *, user: str | None, include_finished: bool, limit: int, states: frozenset[JobState] = frozenset()
    ) -> list[JobRecord]:
        clauses = ["phase=?"]
        params: list[Any] = [Phase.SUBMITTED.value]
        if states:
            clauses.append(f"json_extract(observed, '$.state') IN ({','.join('?' * len(states))})")
            params.extend(sorted(s.value for s in states))
        if user is not None:
            clauses.append("user=?")
            params.append(user)
        if not include_finished:
            clauses.append("terminal=0")
        sql = f"SELECT * FROM jobs WHERE {' AND '.join(clauses)} ORDER BY record_id DESC LIMIT ?"
        return await asyncio.to_thread(self._query, sql, (*params, limit))
