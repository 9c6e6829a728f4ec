"""Job records, their restarts and specs, and the per-user bounds a reservation enforces.

UNIQUE(user, request_id) makes idempotency hold across concurrent calls, restarts and replicas: the
database, not an in-memory map, decides which caller submits. The same transaction admits the
caller's per-user bounds (store/bounds.py) from one indexed sum over the user's records (the
``jobs_usage`` index covers it), after the dialect's per-user lock, so concurrent submissions
cannot all pass one count. A save locks its record's row (FOR UPDATE on PostgreSQL; SQLite's write
transaction already excludes every other writer).
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    Boolean,
    Connection,
    Row,
    Select,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from clusterd.model.causes import Cause
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState
from clusterd.store import bounds, codec
from clusterd.store.database import Database
from clusterd.store.locks import RecordLock, RecordLocks
from clusterd.store.records import JobRecord, LiveRow, Phase, RestartEntry
from clusterd.store.tables import finished, jobs, live, restarts, specs

_ROW = (
    jobs.c.record_id,
    jobs.c.user,
    jobs.c.request_id,
    jobs.c.job_id,
    jobs.c.phase,
    jobs.c.terminal,
    jobs.c.superseded,
    jobs.c.state,
    jobs.c.tasks,
    jobs.c.created,
    jobs.c.observed,
)

# The statements every submit and save runs, built once: building and keying a statement costs more
# Python than running it on SQLite, and SQLAlchemy memoizes a reused statement's cache key.
# Its constants are written into the SQL (bound, they cost more Python than the sum itself).
_0: ColumnElement[int] = literal_column("0")
_1: ColumnElement[int] = literal_column("1")
_USAGE = select(
    func.coalesce(func.sum(case((live(), jobs.c.tasks), else_=_0)), _0),
    func.coalesce(func.sum(case((live(), jobs.c.spec_bytes), else_=_0)), _0),
    func.coalesce(func.sum(case((live(), _0), else_=_1)), _0),
    func.coalesce(func.sum(case((live(), _0), else_=jobs.c.spec_bytes)), _0),
).where(jobs.c.user == bindparam("user"))
_BY_REQUEST = select(*_ROW).where(jobs.c.user == bindparam("user"), jobs.c.request_id == bindparam("request_id"))
_BY_RECORD = select(*_ROW).where(jobs.c.record_id == bindparam("record_id"))
_INSERT_JOB = insert(jobs).returning(*_ROW)
_INSERT_SPEC = insert(specs)
_HELD_JOB_ID = select(jobs.c.job_id).where(jobs.c.record_id == bindparam("record_id"))
_HOLDER = (
    select(jobs.c.record_id, jobs.c.terminal, jobs.c.observed)
    .where(jobs.c.job_id == bindparam("job_id"), jobs.c.superseded == False)  # noqa: E712
    .with_for_update()
)
_LOCK_ROW = select(jobs.c.job_id, jobs.c.superseded).where(jobs.c.record_id == bindparam("record_id")).with_for_update()
_UPDATE = (
    update(jobs)
    .where(jobs.c.record_id == bindparam("b_record_id"))
    .values(
        job_id=bindparam("b_job_id"),
        phase=bindparam("b_phase"),
        state=bindparam("b_state"),
        observed=bindparam("b_observed", type_=jobs.c.observed.type),
        terminal=bindparam("b_terminal", type_=Boolean),
        updated=bindparam("b_now", type_=jobs.c.updated.type),
        finished=case(
            (bindparam("b_done", type_=Boolean), func.coalesce(jobs.c.finished, bindparam("b_now"))), else_=null()
        ),
    )
)


class JobRecords:
    """The job records of one store; every method is safe across replicas."""

    def __init__(self, db: Database, locks: RecordLocks) -> None:
        self._db = db
        self._locks = locks

    def record_lock(self, record_id: int) -> RecordLock:
        """Serializes read-modify-write of one record between the reconciler and RPC handlers."""
        return self._locks(record_id)

    async def reserve(
        self,
        user: str,
        request_id: str,
        spec: JobSpec,
        *,
        tasks: int = 1,
        limits: bounds.UserBounds | None = None,
    ) -> tuple[JobRecord, bool]:
        """Create a SUBMITTING record, or return the live one holding ``(user, request_id)``.

        Returns (record, created); only created=True may run sbatch. ``limits`` are admitted in the
        same transaction (finished records pruned oldest first; ResourceExhausted when live work
        alone passes a bound). A retry of a held request_id is returned whatever the bounds: it
        submits nothing new. Commits durably: sbatch runs only after it.
        """
        blob = codec.spec_bytes(spec)
        rec, created = await self._db.write(
            lambda conn: self._reserve(conn, user, request_id, blob, tasks, limits), durable=True
        )
        if created:
            rec.spec = spec  # the caller's own message: not a second multi-MiB copy decoded from the blob
        return rec, created

    def _reserve(
        self, conn: Connection, user: str, request_id: str, blob: bytes, tasks: int, limits: bounds.UserBounds | None
    ) -> tuple[JobRecord, bool]:
        self._db.dialect.lock_user(conn, user)
        if request_id:
            row = conn.execute(_BY_REQUEST, {"user": user, "request_id": request_id}).first()
            if row is not None and row.phase != Phase.FAILED.value:
                return _records(conn, [row], with_spec=True)[0], False  # a retry is not a new job
            if row is not None:  # a failed attempt submitted nothing: this retry may submit
                _delete(conn, [row.record_id])
        if limits is not None:
            prune = bounds.admit(limits, usage(conn, user), user=user, tasks=tasks, spec_bytes=len(blob))
            if prune.needed:
                _delete(conn, prune.choose(_oldest_finished(conn, user, prune.rows)))
        now = time.time()
        row = conn.execute(
            _INSERT_JOB,
            {
                "user": user,
                "request_id": request_id,
                "phase": Phase.SUBMITTING.value,
                "terminal": False,
                "superseded": False,
                "state": JobState.PENDING.value,
                "tasks": tasks,
                "spec_bytes": len(blob),
                "created": now,
                "updated": now,
                "observed": {},
            },
        ).one()
        conn.execute(_INSERT_SPEC, {"record_id": row.record_id, "spec": blob})
        return _record(row, [], None), True

    async def save(self, rec: JobRecord) -> None:
        """Write ``rec``; a superseded record is frozen, and giving ``rec`` a Slurm id another
        current record holds supersedes that one. Assigning a Slurm id commits durably (an
        acknowledged submit rests on it)."""
        durable = (lambda conn: _assigns_job_id(conn, rec)) if rec.job_id else False
        await self._db.write(lambda conn: _update(conn, rec), durable=durable)

    async def record_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        """Append a restart and save the record with it, atomically (also appended to ``rec``)."""
        await self._db.write(lambda conn: _record_restart(conn, rec, entry))
        rec.restarts.append(entry)

    async def amend_last_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        """Replace ``rec``'s newest restart with ``entry`` (what the run after it looked like)."""
        current = select(jobs.c.record_id).where(jobs.c.record_id == rec.record_id, jobs.c.superseded == False)  # noqa: E712
        stmt = (
            update(restarts)
            .where(restarts.c.record_id == rec.record_id, restarts.c.seq == len(rec.restarts) - 1, current.exists())
            .values(nodes_after=entry.nodes_after, detail=entry.detail, phases=json.dumps(entry.phases, sort_keys=True))
        )
        await self._db.write(lambda conn: conn.execute(stmt))
        rec.restarts[-1] = entry

    async def restarts_since(
        self, since: float, cause: Cause | None = None
    ) -> builtins.list[tuple[int, str, str, RestartEntry]]:
        """Every restart decided at or after ``since`` (of ``cause`` only, when given), oldest first,
        superseded records' too, with its record's id, Slurm job id and user: what a starting
        service learns again from the decisions it already made (node health, failure history)."""
        stmt = (
            select(restarts, jobs.c.job_id, jobs.c.user)
            .join(jobs, jobs.c.record_id == restarts.c.record_id)
            .where(restarts.c.time >= since)
            .order_by(restarts.c.time, restarts.c.record_id, restarts.c.seq)
        )
        if cause is not None:
            stmt = stmt.where(restarts.c.cause == cause.value)
        rows = await self._db.read(lambda conn: conn.execute(stmt).all())
        return [(int(r.record_id), r.job_id or "", r.user, codec.restart_from(r._mapping)) for r in rows]

    async def first_created(self) -> float | None:
        """When the oldest record still kept was created (None: no record): since when, at the latest,
        the service has been watching this cluster."""
        stmt = select(jobs.c.created).order_by(jobs.c.record_id).limit(1)
        return await self._db.read(lambda conn: conn.execute(stmt).scalar())

    async def get_by_record(self, record_id: int) -> JobRecord | None:
        rows = await self._db.read(
            lambda conn: _records(conn, conn.execute(_BY_RECORD, {"record_id": record_id}).all(), with_spec=True)
        )
        return rows[0] if rows else None

    async def get_by_job_id(self, job_id: str, *, user: str | None = None, with_spec: bool = True) -> JobRecord | None:
        """The record Slurm id ``job_id`` names now (the current one), else the newest that held it.

        With ``user``, only that user's records: after Slurm reused an id, each owner finds their
        own job under it, and only the newest owner's record is current (``superseded`` False).
        Without ``with_spec`` the record is a compact row (``spec`` left empty).
        """
        stmt = select(*_ROW).where(jobs.c.job_id == job_id)
        if user is not None:
            stmt = stmt.where(jobs.c.user == user)
        stmt = stmt.order_by(jobs.c.superseded, jobs.c.record_id.desc()).limit(1)
        rows = await self._query(stmt, with_spec=with_spec)
        return rows[0] if rows else None

    async def live(self) -> builtins.list[LiveRow]:
        """The records the reconciler must still follow (not terminal, not failed), undecoded.

        ``updated`` changes with every save, so the reconciler can tell a record nobody touched since
        its last look from one an RPC changed. Superseded records are terminal, so a reused Slurm id
        resolves to its newest record only.
        """
        stmt = (
            select(jobs.c.record_id, jobs.c.phase, jobs.c.job_id, jobs.c.updated)
            .where(live())
            .order_by(jobs.c.record_id)
        )
        rows = await self._db.read(lambda conn: conn.execute(stmt).all())
        return [LiveRow(int(r.record_id), Phase(r.phase), r.job_id or "", float(r.updated)) for r in rows]

    async def finished(
        self,
        *,
        user: str | None,
        since: float,
        until: float,
        limit: int,
        states: frozenset[JobState] = frozenset(),
        name_glob: str = "",
    ) -> builtins.list[JobRecord]:
        """Submitted records that finished in [since, until), newest end first, compact.

        ``name_glob``: ``*``, ``?``, ``[...]`` (``[^...]`` negates), case-sensitive, as SQLite's GLOB.
        """
        stmt = _submitted(user, states).where(
            jobs.c.terminal == True,  # noqa: E712
            jobs.c.finished >= since,
            jobs.c.finished < until,
        )
        if name_glob:
            stmt = stmt.where(self._db.dialect.glob(jobs.c.observed["name"].as_string(), name_glob))
        stmt = stmt.order_by(jobs.c.finished.desc(), jobs.c.record_id.desc()).limit(limit)
        return await self._query(stmt, with_spec=False)

    async def list(
        self, *, user: str | None, include_finished: bool, limit: int, states: frozenset[JobState] = frozenset()
    ) -> builtins.list[JobRecord]:
        """Submitted records, newest first, compact (``spec`` left empty, never decoded)."""
        stmt = _submitted(user, states)
        if not include_finished:
            stmt = stmt.where(jobs.c.terminal == False)  # noqa: E712
        return await self._query(stmt.order_by(jobs.c.record_id.desc()).limit(limit), with_spec=False)

    async def prune_finished(self, *, older_than: float, keep_per_user: int) -> int:
        """Delete finished records that ended before ``older_than`` or past each user's newest
        ``keep_per_user`` (0 = no count bound); returns how many went."""
        rank = (
            func.row_number()
            .over(partition_by=jobs.c.user, order_by=(jobs.c.finished.desc(), jobs.c.record_id.desc()))
            .label("rank")
        )
        ranked = select(jobs.c.record_id, jobs.c.finished, rank).where(finished()).subquery()
        old: ColumnElement[bool] = ranked.c.finished < older_than
        if keep_per_user > 0:
            old = old | (ranked.c.rank > keep_per_user)
        stmt = select(ranked.c.record_id).where(old)

        def prune(conn: Connection) -> int:
            ids = [int(i) for i in conn.execute(stmt).scalars()]
            _delete(conn, ids)
            return len(ids)

        return await self._db.write(prune)

    async def _query(self, stmt: Select[Any], *, with_spec: bool) -> builtins.list[JobRecord]:
        return await self._db.read(lambda conn: _records(conn, conn.execute(stmt).all(), with_spec=with_spec))


def usage(conn: Connection, user: str) -> bounds.Usage:
    """What ``user`` holds now: one sum over their records, answered from the ``jobs_usage`` index."""
    return bounds.Usage(*(int(v) for v in conn.execute(_USAGE, {"user": user}).one()))


def _submitted(user: str | None, states: frozenset[JobState]) -> Select[Any]:
    stmt = select(*_ROW).where(jobs.c.phase == Phase.SUBMITTED.value)
    if states:
        stmt = stmt.where(jobs.c.state.in_(sorted(s.value for s in states)))
    if user is not None:
        stmt = stmt.where(jobs.c.user == user)
    return stmt


def _oldest_finished(conn: Connection, user: str, rows: int | None) -> list[tuple[int, int]]:
    """``(record_id, spec_bytes)`` of the user's finished records, oldest first (``rows``: at most)."""
    stmt = (
        select(jobs.c.record_id, jobs.c.spec_bytes)
        .where(jobs.c.user == user, finished())
        .order_by(jobs.c.finished, jobs.c.record_id)
        .limit(rows)
    )
    return [(int(i), int(b)) for i, b in conn.execute(stmt).all()]


def _delete(conn: Connection, ids: list[int]) -> None:
    for chunk in _chunks(ids):
        for table in (restarts, specs, jobs):
            conn.execute(delete(table).where(table.c.record_id.in_(chunk)))


def _assigns_job_id(conn: Connection, rec: JobRecord) -> bool:
    held = conn.execute(_HELD_JOB_ID, {"record_id": rec.record_id}).first()
    return held is not None and held.job_id != rec.job_id


def _update(conn: Connection, rec: JobRecord) -> None:
    """Write ``rec`` (its row locked); a record given a Slurm id another current record holds
    supersedes that one, which is then frozen: terminal, its fate unknown."""
    row = conn.execute(_LOCK_ROW, {"record_id": rec.record_id}).first()
    if row is None or row.superseded:
        return  # pruned, or frozen: Slurm's id now names another record's job
    now = time.time()
    if rec.job_id and row.job_id != rec.job_id:
        _supersede(conn, rec.job_id, now)
    conn.execute(
        _UPDATE,
        {
            "b_record_id": rec.record_id,
            "b_job_id": rec.job_id or None,
            "b_phase": rec.phase.value,
            "b_state": rec.state.value,
            "b_observed": codec.observed(rec),
            "b_terminal": rec.terminal,
            "b_now": now,
            "b_done": rec.terminal or rec.phase is Phase.FAILED,
        },
    )


def _supersede(conn: Connection, job_id: str, now: float) -> None:
    """Freeze the current record holding ``job_id`` (at most one: the ``jobs_current`` index)."""
    held = conn.execute(_HOLDER, {"job_id": job_id}).first()
    if held is None:
        return
    values: dict[str, Any] = {"superseded": True, "terminal": True, "updated": now}
    values["finished"] = func.coalesce(jobs.c.finished, now)
    if not held.terminal:
        values["state"] = JobState.UNKNOWN.value
        values["observed"] = {**held.observed, "final_reason": codec.superseded_reason(job_id)}
    conn.execute(update(jobs).where(jobs.c.record_id == held.record_id).values(**values))


def _record_restart(conn: Connection, rec: JobRecord, entry: RestartEntry) -> None:
    """The restart row and the record's new state in ONE transaction: a crash keeps both or neither."""
    row = conn.execute(select(jobs.c.superseded).where(jobs.c.record_id == rec.record_id).with_for_update()).first()
    if row is not None and not row.superseded:
        seq = conn.execute(select(func.count()).where(restarts.c.record_id == rec.record_id)).scalar_one()
        conn.execute(
            insert(restarts).values(
                record_id=rec.record_id,
                seq=seq,
                cause=entry.cause.value,
                nodes=json.dumps(list(entry.failed_nodes)),
                time=entry.time,
                step=entry.checkpoint_step,
                exit_code=entry.exit_code,
                detail=entry.detail,
                nodes_before=entry.nodes_before,
                nodes_after=entry.nodes_after,
                detected_by=entry.detected_by,
                phases=json.dumps(entry.phases, sort_keys=True),
            )
        )
    _update(conn, rec)


def _records(conn: Connection, rows: Sequence[Row[Any]], *, with_spec: bool) -> list[JobRecord]:
    """Rows -> records; restarts in one query for all of them, specs only when asked."""
    ids = [int(r.record_id) for r in rows]
    found: dict[int, list[RestartEntry]] = {i: [] for i in ids}
    blobs: dict[int, bytes] = {}
    for chunk in _chunks(ids):
        stmt = select(restarts).where(restarts.c.record_id.in_(chunk)).order_by(restarts.c.record_id, restarts.c.seq)
        for r in conn.execute(stmt):
            found[int(r.record_id)].append(codec.restart_from(r._mapping))
        if with_spec:
            stmt = select(specs.c.record_id, specs.c.spec).where(specs.c.record_id.in_(chunk))
            blobs.update((int(record_id), bytes(blob)) for record_id, blob in conn.execute(stmt))
    out = []
    for row in rows:
        spec = None
        if with_spec:
            blob = blobs.get(int(row.record_id))
            spec = codec.spec_from(blob) if blob is not None else JobSpec()
        out.append(_record(row, found[int(row.record_id)], spec))
    return out


def _record(row: Row[Any], found: list[RestartEntry], spec: JobSpec | None) -> JobRecord:
    return codec.record_from(row._mapping, row.observed, found, spec)


def _chunks(ids: list[int], size: int = 500) -> Iterable[list[int]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]
