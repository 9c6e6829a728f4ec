"""SQLite (WAL) store of job records and request ids.

All blocking SQLite work runs on the store's own thread (:meth:`SqliteJobStore._run`) here and
nowhere else: one connection serializes it anyway, and a thread of its own keeps store
calls from queueing behind (or blocking) the event loop's shared worker threads under load. A
UNIQUE(user, request_id) constraint makes idempotency hold across concurrent calls and restarts:
the database, not an in-memory map, decides which caller submits; the same transaction enforces
the caller's per-user bounds (store/bounds.py). Writes are group-committed (:meth:`_write`). The
writes a submit rests on (the reservation, before sbatch, and the save that records Slurm's job
id) sync the WAL to disk before they return, so they survive a power loss, on a sync thread that
lets the next group commit meanwhile; the reconciler's many updates, which the next poll re-derives
from Slurm, commit with synchronous=NORMAL (bench/tenancy.py: a synced save costs ~5x a NORMAL one
here). The files are the
service's alone: directory 0700, database (and the -wal/-shm files SQLite creates with the
database's mode) 0600.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import contextvars
import functools
import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState
from clusterd.store import bounds, codec, schema
from clusterd.store.records import EventRow, JobRecord, Lease, LiveRow, LoggedEvent, Phase, RestartEntry

T = TypeVar("T")
_ROW = "jobs.record_id, user, request_id, job_id, phase, terminal, superseded, state, tasks, created, observed"
_FINISHED = schema.finished()
_LIVE = schema.live()


def _private(path: Path) -> None:
    """Directory 0700 and database 0600, created so: never a moment readable by others."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):  # files of an older, laxer version
        if name.exists():
            os.chmod(name, 0o600)


class SqliteJobStore:
    """Async facade over one SQLite connection guarded by a lock (one replica: the embedded default)."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        _private(self._path)
        self._lock = threading.RLock()  # reentrant: a group commit holds it around its writes' own
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._group: _Group | None = None  # the group commit under way (store thread only)
        self._sync = _WalSync(f"{self._path}-wal")
        self._queued: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._queued_lock = threading.Lock()
        self._record_locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()
        self._db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            schema.migrate(self._db)

    async def open(self) -> None:
        """Nothing to do: the constructor connected and migrated (kept for the JobStore seam)."""

    async def close(self) -> None:
        await self._run(self._close)
        self._thread.shutdown(wait=False)

    async def _run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the store's thread (the caller's context vars ride along)."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, _bound(fn, *args, **kwargs))

    async def _write(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn`` in the next group commit: the writes queued while the store thread was busy share
        one transaction and one sync (each in a savepoint: one write's error undoes it alone), so
        16 concurrent submits pay about one fsync, not 16 in a row; the sync runs on a thread of its
        own (:class:`_WalSync`) while this one commits the next group."""
        return await self._queue(fn, *args, **kwargs)

    def _queue(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        """Queue ``fn`` for the next group commit, now: the one store thread takes work in order, so
        whatever the loop asks of the store after this call runs after ``fn``."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        with self._queued_lock:
            self._queued.append((_bound(fn, *args, **kwargs), done))
            first = len(self._queued) == 1
        if first:
            self._thread.submit(self._commit_queued, loop)
        return done

    def _commit_queued(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._queued_lock:
            queued, self._queued = self._queued, []
        outcomes: list[tuple[Any, BaseException | None]] = []
        durable = False
        with self._lock:
            group = self._group = _Group(self._db)
            try:
                group.begin()
                for call, _ in queued:
                    outcomes.append(group.part(call))
                group.commit()
                durable = group.durable
            except Exception as exc:  # the transaction itself failed: none of its writes stand
                outcomes = [(None, exc)] * len(queued)
            finally:
                self._group = None
                if self._db.in_transaction:  # left open only by a failure: roll it back, not on
                    self._db.execute("ROLLBACK")
        answer = functools.partial(_answer, loop, [done for _, done in queued], outcomes)
        if durable:
            self._sync.after_sync(answer)  # this thread goes on to the next group meanwhile
        else:
            answer(None)

    def _close(self) -> None:
        self._sync.close()
        with self._lock:
            self._db.close()

    # -- sync internals (run in a worker thread, holding self._lock) ---------------------------

    def _transaction(self, *, durable: bool = False) -> _Group:
        """The group commit this write is part of (every write runs in one: :meth:`_write`)."""
        assert self._group is not None, "a store write outside _write"
        self._group.durable |= durable
        return self._group

    def _records(self, rows: list[sqlite3.Row], *, with_spec: bool) -> list[JobRecord]:
        """Rows -> records; restarts in one query for all of them, specs only when asked."""
        ids = [r["record_id"] for r in rows]
        restarts: dict[int, list[RestartEntry]] = {i: [] for i in ids}
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            for r in self._db.execute(f"SELECT * FROM restarts WHERE record_id IN ({marks}) ORDER BY seq", chunk):
                restarts[r["record_id"]].append(codec.restart_from(r))
        out = []
        for row in rows:
            spec = None
            if with_spec:
                (blob,) = self._db.execute("SELECT spec FROM specs WHERE record_id=?", (row["record_id"],)).fetchone()
                spec = codec.spec_from(blob)
            out.append(codec.record_from(row, json.loads(row["observed"]), restarts[row["record_id"]], spec))
        return out

    def _usage(self, user: str) -> bounds.Usage:
        """What ``user`` holds: one row, kept by the schema's triggers on every write of ``jobs``."""
        row = self._db.execute(
            "SELECT live_tasks, live_bytes, finished, finished_bytes FROM usage WHERE user=?", (user,)
        ).fetchone()
        return bounds.Usage(*(int(v) for v in row)) if row is not None else bounds.Usage(0, 0, 0, 0)

    def _oldest_finished(self, user: str, rows: int | None) -> list[tuple[int, int]]:
        """``(record_id, spec_bytes)`` of the user's finished records, oldest first (``rows``: at most)."""
        sql = f"SELECT record_id, spec_bytes FROM jobs WHERE user=? AND {_FINISHED} ORDER BY finished, record_id"
        cur = self._db.execute(sql + " LIMIT ?", (user, rows)) if rows is not None else self._db.execute(sql, (user,))
        return [(int(i), int(b)) for i, b in cur.fetchall()]

    def _delete(self, ids: list[int]) -> None:
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            for table in ("restarts", "specs", "jobs"):
                self._db.execute(f"DELETE FROM {table} WHERE record_id IN ({marks})", chunk)

    def _reserve(
        self, user: str, request_id: str, spec: bytes, tasks: int, limits: bounds.UserBounds | None
    ) -> tuple[JobRecord, bool]:
        now = time.time()
        with self._lock, self._transaction(durable=True):
            if request_id:
                row = self._db.execute(
                    f"SELECT {_ROW} FROM jobs WHERE user=? AND request_id=?", (user, request_id)
                ).fetchone()
                if row is not None and row["phase"] != Phase.FAILED.value:
                    return self._records([row], with_spec=True)[0], False  # a retry is not a new job
                if row is not None:  # a failed attempt submitted nothing: this retry may submit
                    self._delete([row["record_id"]])
            if limits is not None:
                prune = bounds.admit(limits, self._usage(user), user=user, tasks=tasks, spec_bytes=len(spec))
                if prune.needed:
                    self._delete(prune.choose(self._oldest_finished(user, prune.rows)))
            cur = self._db.execute(
                "INSERT INTO jobs(user, request_id, phase, tasks, spec_bytes, created, updated) VALUES (?,?,?,?,?,?,?)",
                (user, request_id, Phase.SUBMITTING.value, tasks, len(spec), now, now),
            )
            self._db.execute("INSERT INTO specs(record_id, spec) VALUES (?, ?)", (cur.lastrowid, spec))
            row = self._db.execute(f"SELECT {_ROW} FROM jobs WHERE record_id=?", (cur.lastrowid,)).fetchone()
        return codec.record_from(row, json.loads(row["observed"]), [], None), True  # new: no restarts yet

    def _update(self, rec: JobRecord) -> None:
        """Write ``rec``; a record given a Slurm id another record holds supersedes that one."""
        now = time.time()
        row = self._db.execute("SELECT job_id, superseded FROM jobs WHERE record_id=?", (rec.record_id,)).fetchone()
        if row is None or row["superseded"]:
            return  # pruned, or frozen: Slurm's id now names another record's job
        if rec.job_id and row["job_id"] != rec.job_id:
            reason = codec.superseded_reason(rec.job_id)
            self._db.execute(
                "UPDATE jobs SET superseded=1, updated=?, finished=COALESCE(finished, ?), "
                "state=CASE WHEN terminal=0 THEN 'UNKNOWN' ELSE state END, "
                "observed=CASE WHEN terminal=0 THEN json_set(observed, '$.final_reason', ?) ELSE observed END, "
                "terminal=1 WHERE job_id=? AND record_id!=? AND superseded=0",
                (now, now, reason, rec.job_id, rec.record_id),
            )
        finished = rec.terminal or rec.phase is Phase.FAILED
        self._db.execute(
            "UPDATE jobs SET job_id=?, phase=?, state=?, observed=?, terminal=?, updated=?, "
            "finished=CASE WHEN ? THEN COALESCE(finished, ?) END WHERE record_id=?",
            (
                rec.job_id or None,
                rec.phase.value,
                rec.state.value,
                codec.observed_json(rec),
                int(rec.terminal),
                now,
                int(finished),
                now,
                rec.record_id,
            ),
        )

    def _save(self, rec: JobRecord) -> None:
        with self._lock:
            row = self._db.execute("SELECT job_id FROM jobs WHERE record_id=?", (rec.record_id,)).fetchone()
            assigns_job_id = bool(rec.job_id) and row is not None and row["job_id"] != rec.job_id
            with self._transaction(durable=assigns_job_id):
                self._update(rec)

    def _record_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        """The restart row and the record's new state in ONE transaction: a crash keeps both or neither."""
        with self._lock, self._transaction():
            (seq,) = self._db.execute("SELECT COUNT(*) FROM restarts WHERE record_id=?", (rec.record_id,)).fetchone()
            self._db.execute(
                "INSERT INTO restarts(record_id, seq, cause, nodes, time, step, exit_code, detail, nodes_before, "
                "nodes_after, detected_by, phases) SELECT ?,?,?,?,?,?,?,?,?,?,?,? WHERE EXISTS "
                "(SELECT 1 FROM jobs WHERE record_id=? AND superseded=0)",
                (
                    rec.record_id,
                    seq,
                    entry.cause.value,
                    json.dumps(list(entry.failed_nodes)),
                    entry.time,
                    entry.checkpoint_step,
                    entry.exit_code,
                    entry.detail,
                    entry.nodes_before,
                    entry.nodes_after,
                    entry.detected_by,
                    json.dumps(entry.phases, sort_keys=True),
                    rec.record_id,
                ),
            )
            self._update(rec)

    def _amend_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        with self._lock, self._transaction():
            self._db.execute(
                "UPDATE restarts SET nodes_after=?, detail=?, phases=? WHERE record_id=? AND seq=? AND EXISTS "
                "(SELECT 1 FROM jobs WHERE record_id=? AND superseded=0)",
                (
                    entry.nodes_after,
                    entry.detail,
                    json.dumps(entry.phases, sort_keys=True),
                    rec.record_id,
                    len(rec.restarts) - 1,
                    rec.record_id,
                ),
            )

    def _query(self, sql: str, params: tuple[Any, ...], *, with_spec: bool) -> list[JobRecord]:
        with self._lock:
            return self._records(self._db.execute(sql, params).fetchall(), with_spec=with_spec)

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            return [tuple(r) for r in self._db.execute(sql, params).fetchall()]

    def _prune(self, cutoff: float, keep: int) -> int:
        with self._lock, self._transaction():
            ids = [
                r[0]
                for r in self._db.execute(
                    f"SELECT record_id FROM (SELECT record_id, finished, ROW_NUMBER() OVER "
                    f"(PARTITION BY user ORDER BY finished DESC, record_id DESC) AS rank FROM jobs WHERE {_FINISHED}) "
                    "WHERE finished < ? OR (? > 0 AND rank > ?)",
                    (cutoff, keep, keep),
                )
            ]
            self._delete(ids)
        return len(ids)

    def _append_events(self, events: Sequence[EventRow]) -> list[int]:
        with self._lock, self._transaction():
            return [
                int(
                    self._db.execute(
                        "INSERT INTO events(record_id, type, previous_state, message, time, record)"
                        " VALUES (?,?,?,?,?,?)",
                        (
                            e.record.record_id,
                            e.type.value,
                            e.previous_state,
                            e.message,
                            e.time,
                            codec.event_record_json(e.record),
                        ),
                    ).lastrowid
                    or 0
                )
                for e in events
            ]

    def _events_after(self, seq: int, limit: int) -> list[LoggedEvent]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, type, previous_state, message, time, record FROM events "
                "WHERE seq > ? ORDER BY seq LIMIT ?",
                (seq, limit),
            ).fetchall()
        return [
            LoggedEvent(
                r["seq"],
                codec.event_record_from(r["record"]),
                EventType(r["type"]),
                r["previous_state"],
                r["message"],
                r["time"],
            )
            for r in rows
        ]

    def _lease(self, name: str) -> Lease | None:
        row = self._db.execute("SELECT name, holder, epoch, expires FROM leases WHERE name=?", (name,)).fetchone()
        if row is None:
            return None
        return Lease(row["name"], row["holder"], int(row["epoch"]), float(row["expires"]) - time.time())

    def _acquire_lease(self, name: str, holder: str, ttl: float) -> Lease | None:
        with self._lock, self._transaction():
            now = time.time()
            row = self._db.execute("SELECT holder, epoch, expires FROM leases WHERE name=?", (name,)).fetchone()
            if row is None:
                epoch = 1
            elif row["expires"] > now and row["holder"] != holder:
                return None  # another holder's live lease
            else:
                kept = row["expires"] > now and row["holder"] == holder
                epoch = int(row["epoch"]) if kept else int(row["epoch"]) + 1
            self._db.execute(
                "INSERT INTO leases(name, holder, epoch, expires) VALUES (?,?,?,?) ON CONFLICT(name) DO UPDATE "
                "SET holder=excluded.holder, epoch=excluded.epoch, expires=excluded.expires",
                (name, holder, epoch, now + ttl),
            )
            return self._lease(name)

    def _renew_lease(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        with self._lock, self._transaction():
            now = time.time()
            cur = self._db.execute(
                "UPDATE leases SET expires=? WHERE name=? AND holder=? AND epoch=? AND expires > ?",
                (now + ttl, name, holder, epoch, now),
            )
            return cur.rowcount == 1

    def _current_lease(self, name: str) -> Lease | None:
        with self._lock:
            return self._lease(name)

    def _release_lease(self, name: str, holder: str, epoch: int) -> None:
        with self._lock, self._transaction():
            now = time.time()
            self._db.execute(
                "UPDATE leases SET expires=? WHERE name=? AND holder=? AND epoch=? AND expires > ?",
                (now, name, holder, epoch, now),
            )

    # -- async API ---------------------------------------------------------------------------

    def record_lock(self, record_id: int) -> asyncio.Lock:
        """Serializes read-modify-write of one record between the reconciler and RPC handlers."""
        lock = self._record_locks.get(record_id)
        if lock is None:
            lock = asyncio.Lock()
            self._record_locks[record_id] = lock
        return lock

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

        Returns (record, created). Only the caller that got created=True may run sbatch. With
        ``limits``, the new record must fit ``user``'s bounds (finished records are pruned, oldest
        first, to make room); raises ResourceExhausted naming the limit when it cannot. A retry of
        a held request_id is returned whatever the bounds: it submits nothing new.
        """
        rec, created = await self._write(self._reserve, user, request_id, codec.spec_bytes(spec), tasks, limits)
        if created:
            rec.spec = spec  # the caller's own message: not a second multi-MiB copy parsed back from the blob
        return rec, created

    async def save(self, rec: JobRecord) -> None:
        """Write ``rec`` (a superseded record is frozen: saving it changes nothing)."""
        await self._write(self._save, rec)

    def save_behind(self, rec: JobRecord) -> asyncio.Future[None]:
        """Queue the save of ``rec`` now; every later read and write of this store sees it."""
        return self._queue(self._save, rec)

    async def record_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        """Append a restart and save the record with it, atomically."""
        await self._write(self._record_restart, rec, entry)
        rec.restarts.append(entry)

    async def amend_last_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        """Replace ``rec``'s newest restart with ``entry`` (what the run after it looked like)."""
        await self._write(self._amend_restart, rec, entry)
        rec.restarts[-1] = entry

    async def get_by_record(self, record_id: int) -> JobRecord | None:
        sql = f"SELECT {_ROW} FROM jobs WHERE record_id=?"
        rows = await self._run(self._query, sql, (record_id,), with_spec=True)
        return rows[0] if rows else None

    async def get_by_job_id(self, job_id: str, *, user: str | None = None, with_spec: bool = True) -> JobRecord | None:
        """The record Slurm id ``job_id`` names now (the current one), else the newest that held it.

        With ``user``, only that user's records: after Slurm reused an id, each owner finds their
        own job under it, and only the newest owner's record is current (``superseded`` False).
        Without ``with_spec`` the record is a compact row (``spec`` left empty).
        """
        where, params = ("job_id=? AND user=?", (job_id, user)) if user is not None else ("job_id=?", (job_id,))
        sql = f"SELECT {_ROW} FROM jobs WHERE {where} ORDER BY superseded, record_id DESC LIMIT 1"
        rows = await self._run(self._query, sql, params, with_spec=with_spec)
        return rows[0] if rows else None

    async def live(self) -> list[LiveRow]:
        """The records the reconciler must still follow (not terminal, not failed), without decoding them.

        ``updated`` changes with every save, so the reconciler can tell a record nobody touched since
        its last look from one an RPC changed; decoding is left to the few it must re-read.
        Superseded records are terminal, so a reused Slurm id resolves to its newest record only.
        """
        sql = f"SELECT record_id, phase, job_id, updated FROM jobs WHERE {_LIVE} ORDER BY record_id"
        rows = await self._run(self._rows, sql, ())
        return [LiveRow(int(rid), Phase(phase), job_id or "", float(updated)) for rid, phase, job_id, updated in rows]

    async def finished(
        self,
        *,
        user: str | None,
        since: float,
        until: float,
        limit: int,
        states: frozenset[JobState] = frozenset(),
        name_glob: str = "",
    ) -> list[JobRecord]:
        """Submitted records that finished in [since, until), newest end first, as compact rows.

        ``name_glob`` is matched with SQLite's GLOB (``*``, ``?``, ``[...]``; case-sensitive).
        """
        clauses = ["phase=?", "terminal=1", "finished >= ?", "finished < ?"]
        params: list[Any] = [Phase.SUBMITTED.value, since, until]
        if states:
            clauses.append(f"state IN ({','.join('?' * len(states))})")
            params.extend(sorted(s.value for s in states))
        if user is not None:
            clauses.append("user=?")
            params.append(user)
        if name_glob:
            clauses.append("json_extract(observed, '$.name') GLOB ?")
            params.append(name_glob)
        sql = f"SELECT {_ROW} FROM jobs WHERE {' AND '.join(clauses)} ORDER BY finished DESC, record_id DESC LIMIT ?"
        return await self._run(self._query, sql, (*params, limit), with_spec=False)

    async def list(
        self, *, user: str | None, include_finished: bool, limit: int, states: frozenset[JobState] = frozenset()
    ) -> list[JobRecord]:
        """Submitted records, newest first, as compact rows: ``spec`` is left empty, never decoded."""
        clauses = ["phase=?"]
        params: list[Any] = [Phase.SUBMITTED.value]
        if states:
            clauses.append(f"state IN ({','.join('?' * len(states))})")
            params.extend(sorted(s.value for s in states))
        if user is not None:
            clauses.append("user=?")
            params.append(user)
        if not include_finished:
            clauses.append("terminal=0")
        sql = f"SELECT {_ROW} FROM jobs WHERE {' AND '.join(clauses)} ORDER BY record_id DESC LIMIT ?"
        return await self._run(self._query, sql, (*params, limit), with_spec=False)

    async def prune_finished(self, *, older_than: float, keep_per_user: int) -> int:
        """Delete finished records that ended before ``older_than`` or past each user's newest
        ``keep_per_user`` (0 = no count bound); returns how many went."""
        return await self._write(self._prune, older_than, keep_per_user)

    async def append_events(self, events: Sequence[EventRow]) -> builtins.list[int]:
        """Append in one transaction; seqs (AUTOINCREMENT: never reused) follow commit order."""
        if not events:
            return []
        return await self._write(self._append_events, events)

    async def events_after(self, seq: int, *, limit: int = 1000) -> builtins.list[LoggedEvent]:
        return await self._run(self._events_after, seq, limit)

    async def event_bounds(self) -> tuple[int, int]:
        sql = "SELECT COALESCE(MIN(seq), 0), COALESCE(MAX(seq), 0) FROM events"
        rows = await self._run(self._rows, sql, ())
        return int(rows[0][0]), int(rows[0][1])

    async def prune_events(self, *, older_than: float) -> int:
        return await self._write(self._delete_events, older_than)

    def _delete_events(self, older_than: float) -> int:
        with self._lock, self._transaction():
            return self._db.execute("DELETE FROM events WHERE time < ?", (older_than,)).rowcount

    async def acquire_lease(self, name: str, holder: str, ttl: float) -> Lease | None:
        """Times by this machine's clock: SQLite serves one replica, so there is no other clock."""
        return await self._write(self._acquire_lease, name, holder, ttl)

    async def renew_lease(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        return await self._write(self._renew_lease, name, holder, epoch, ttl)

    async def current_lease(self, name: str) -> Lease | None:
        return await self._run(self._current_lease, name)

    async def release_lease(self, name: str, holder: str, epoch: int) -> None:
        await self._write(self._release_lease, name, holder, epoch)


class _Group:
    """One transaction shared by the queued writes of a group commit (store thread, store lock held).

    Each write runs in a savepoint; its own ``with self._transaction()`` is then this object,
    which only notes whether it asked for a durable commit (the group's WAL is then synced after
    the commit, before any of its writers hears back).
    """

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.durable = False  # a write asked for it: its writers hear back once the WAL is synced

    def begin(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def part(self, call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
        self._db.execute("SAVEPOINT part")
        try:
            value = call()
        except Exception as exc:
            if not self._db.in_transaction:
                raise  # SQLite rolled the whole transaction back (I/O error, disk full): all fail
            self._db.execute("ROLLBACK TO part")
            self._db.execute("RELEASE part")
            return None, exc
        self._db.execute("RELEASE part")
        return value, None

    def commit(self) -> None:
        if self._db.in_transaction:
            self._db.execute("COMMIT")  # a failed COMMIT leaves the transaction to the caller's ROLLBACK

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None  # the savepoint around the write undoes it on an exception


class _WalSync:
    """Syncs the WAL file, as synchronous=FULL would at a durable group's COMMIT, on a thread of its
    own: while one sync runs, the store thread commits the next group, and one sync answers every
    group committed before it began (a PRAGMA set inside a transaction only applies to the next one,
    and FULL would sync every commit, inside the store thread's turn)."""

    def __init__(self, wal: str) -> None:
        self._wal = wal
        self._waiting: list[Callable[[BaseException | None], None]] = []
        self._changed = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="sqlite-sync", daemon=True)
        self._thread.start()

    def after_sync(self, then: Callable[[BaseException | None], None]) -> None:
        """``then(error)`` on the sync thread once a sync begun after this call has ended."""
        with self._changed:
            self._waiting.append(then)
            self._changed.notify()

    def close(self) -> None:
        """Sync for what waits, then stop."""
        with self._changed:
            self._closing = True
            self._changed.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._waiting and not self._closing:
                    self._changed.wait()
                waiting, self._waiting = self._waiting, []
            if not waiting:
                return
            error: BaseException | None = None
            try:
                fd = os.open(self._wal, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                error = exc
            for then in waiting:
                then(error)


def _answer(
    loop: asyncio.AbstractEventLoop,
    waiters: list[asyncio.Future[Any]],
    outcomes: list[tuple[Any, BaseException | None]],
    sync_error: BaseException | None,
) -> None:
    """Each writer of a group its outcome; a failed sync fails every write of the group."""
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
        for done, (value, error) in zip(waiters, outcomes, strict=True):
            loop.call_soon_threadsafe(_settle, done, value, error or sync_error)


def _bound(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Callable[[], T]:
    """``fn(*args, **kwargs)`` to run on the store's thread in the caller's context (its context vars)."""
    return functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)


def _settle(done: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if done.cancelled():
        return  # the caller went away; the write itself stands (or not) as the group did
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(value)


def _chunks(ids: list[int], size: int = 500) -> Iterable[list[int]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]
