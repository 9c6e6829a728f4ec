"""PostgreSQL store of job records, shared by several clusterd replicas (psycopg 3, async pool).

Same semantics as SqliteJobStore (store/sqlite.py); what SQLite gets from having one writer is made
explicit here. A reservation takes a per-user transaction-level advisory lock, so replicas admit
one user's submissions one at a time (the bounds count cannot be passed by two at once) and
UNIQUE(user, request_id) backs it. Saves lock their row (FOR UPDATE). Event appends take one
advisory lock before nextval, so seqs are handed out and committed in the same order. Lease times
come from the database's clock_timestamp(), so replicas with skewed clocks agree. The writes a
submit's acknowledgement rests on commit with synchronous_commit on; the reconciler's updates
(re-derived from Slurm on the next poll) with it off, as SQLite's NORMAL.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import re
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.errors import ProgrammingError
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState
from clusterd.store import bounds, codec, pg_schema
from clusterd.store.records import EventRow, JobRecord, Lease, LiveRow, LoggedEvent, Phase, RestartEntry

_ROW = 'jobs.record_id, "user", request_id, job_id, phase, terminal, superseded, state, tasks, created, observed'
_FINISHED = "(terminal OR phase = 'failed')"
_LIVE = "NOT terminal AND phase <> 'failed'"
_LEASE = "name, holder, epoch, EXTRACT(EPOCH FROM expires - clock_timestamp())::float8 AS expires_in"

Conn = AsyncConnection[DictRow]


def glob_to_regex(glob: str) -> str:
    """SQLite's GLOB as an anchored PostgreSQL regex: ``*``, ``?``, ``[...]`` (``[^...]``), case-sensitive."""
    out, i = ["^"], 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i + 1
            if j < len(glob) and glob[j] == "^":
                j += 1
            if j < len(glob) and glob[j] == "]":
                j += 1  # a ']' first in the set is literal
            while j < len(glob) and glob[j] != "]":
                j += 1
            if j >= len(glob):
                out.append("(?!)")  # an unclosed set matches nothing, as in SQLite
                break
            body, negate = glob[i + 1 : j], False
            if body.startswith("^"):
                body, negate = body[1:], True
            escaped = "".join("\\" + ch if ch in "\\[]^" else ch for ch in body)
            out.append(f"[{'^' if negate else ''}{escaped}]")
            i = j
        else:
            out.append(re.escape(c) if not c.isalnum() else c)
        i += 1
    out.append("$")
    return "".join(out)


def _lease(row: DictRow | None) -> Lease | None:
    if row is None:
        return None
    return Lease(row["name"], row["holder"], int(row["epoch"]), float(row["expires_in"]))


async def _reset(conn: Conn) -> None:
    """A connection going back to the pool holds no session lock (a bug elsewhere cannot leak one)."""
    await conn.execute("SELECT pg_advisory_unlock_all()")


class PgRecordLock:
    """One record's lock: an in-process asyncio.Lock, then a session advisory lock on a connection
    of the lock pool held until release, so replicas exclude each other too.

    The lock pool is apart from the query pool: holders run queries while they hold it, and
    holders waiting for query connections must never be what keeps those connections taken.
    """

    def __init__(self, pool: AsyncConnectionPool[Conn], record_id: int) -> None:
        self._pool = pool
        self._id = record_id
        self._lock = asyncio.Lock()
        self._conn: Conn | None = None

    def locked(self) -> bool:
        """Whether this process holds it (another replica's hold shows as waiting, not here)."""
        return self._lock.locked()

    async def __aenter__(self) -> PgRecordLock:
        await self._lock.acquire()
        try:
            conn = await self._pool.getconn()
            try:
                await conn.execute("SELECT pg_advisory_lock(%s::bigint)", (self._id,))
            except BaseException:
                await conn.close()  # a cancelled wait may still take it: ending the session drops it
                await self._pool.putconn(conn)
                raise
            self._conn = conn
        except BaseException:
            self._lock.release()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                try:
                    await conn.execute("SELECT pg_advisory_unlock(%s::bigint)", (self._id,))
                except BaseException:
                    await conn.close()
                    raise
                finally:
                    await self._pool.putconn(conn)
        finally:
            self._lock.release()


class PostgresJobStore:
    """Async store over a psycopg connection pool; call :meth:`open` before anything else."""

    def __init__(self, url: str, *, pool_min: int = 2, pool_max: int = 20) -> None:
        """Raises ValueError for a connection string libpq cannot parse (nothing connects yet)."""
        try:
            conninfo_to_dict(url)
        except ProgrammingError as exc:
            raise ValueError(f"not a valid PostgreSQL connection URL: {exc}") from None
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            url,
            min_size=pool_min,
            max_size=pool_max,
            kwargs=kwargs,
            open=False,
            name="clusterd-store",
            reset=_reset,
        )
        self._lock_pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            url, min_size=1, max_size=pool_max, kwargs=kwargs, open=False, name="clusterd-locks", reset=_reset
        )
        self._record_locks: weakref.WeakValueDictionary[int, PgRecordLock] = weakref.WeakValueDictionary()
        self._opened = False

    async def open(self, *, timeout: float = 30.0) -> None:
        """Connect both pools (waiting up to ``timeout`` s for the database) and migrate the schema."""
        await self._pool.open(wait=True, timeout=timeout)
        await self._lock_pool.open(wait=True, timeout=timeout)
        self._opened = True
        async with self._pool.connection() as conn:
            await pg_schema.migrate(conn)

    async def close(self) -> None:
        if self._opened:
            self._opened = False
            await self._lock_pool.close()
            await self._pool.close()

    # -- helpers (each takes the connection of the transaction it runs in) ----------------------

    @asynccontextmanager
    async def _tx(self, *, durable: bool = True) -> AsyncIterator[Conn]:
        async with self._pool.connection() as conn, conn.transaction():
            if not durable:
                await conn.execute("SET LOCAL synchronous_commit TO OFF")
            yield conn

    async def _records(self, conn: Conn, rows: list[DictRow], *, with_spec: bool) -> list[JobRecord]:
        """Rows -> records; restarts in one query for all of them, specs only when asked."""
        ids = [int(r["record_id"]) for r in rows]
        restarts: dict[int, list[RestartEntry]] = {i: [] for i in ids}
        specs: dict[int, JobSpec] = {}
        if ids:
            cur = await conn.execute("SELECT * FROM restarts WHERE record_id = ANY(%s) ORDER BY record_id, seq", (ids,))
            for r in await cur.fetchall():
                restarts[int(r["record_id"])].append(codec.restart_from(r))
            if with_spec:
                cur = await conn.execute("SELECT record_id, spec FROM specs WHERE record_id = ANY(%s)", (ids,))
                for r in await cur.fetchall():
                    specs[int(r["record_id"])] = codec.spec_from(bytes(r["spec"]))
        return [
            codec.record_from(
                row,
                row["observed"],
                restarts[int(row["record_id"])],
                specs.get(int(row["record_id"]), JobSpec()) if with_spec else None,
            )
            for row in rows
        ]

    async def _query(self, sql: str, params: Sequence[Any], *, with_spec: bool) -> list[JobRecord]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql, params)
            return await self._records(conn, await cur.fetchall(), with_spec=with_spec)

    async def _usage(self, conn: Conn, user: str) -> bounds.Usage:
        cur = await conn.execute(
            "SELECT COALESCE(SUM(tasks), 0) AS t, COALESCE(SUM(spec_bytes), 0) AS b "
            f'FROM jobs WHERE "user"=%s AND {_LIVE}',
            (user,),
        )
        live = await cur.fetchone()
        assert live is not None
        cur = await conn.execute(
            f'SELECT COUNT(*) AS n, COALESCE(SUM(spec_bytes), 0) AS b FROM jobs WHERE "user"=%s AND {_FINISHED}',
            (user,),
        )
        finished = await cur.fetchone()
        assert finished is not None
        return bounds.Usage(int(live["t"]), int(live["b"]), int(finished["n"]), int(finished["b"]))

    @staticmethod
    async def _oldest_finished(conn: Conn, user: str, rows: int | None) -> list[tuple[int, int]]:
        """``(record_id, spec_bytes)`` of the user's finished records, oldest first (``rows``: at most)."""
        sql = f'SELECT record_id, spec_bytes FROM jobs WHERE "user"=%s AND {_FINISHED} ORDER BY finished, record_id'
        cur = await (conn.execute(sql + " LIMIT %s", (user, rows)) if rows is not None else conn.execute(sql, (user,)))
        return [(int(r["record_id"]), int(r["spec_bytes"])) for r in await cur.fetchall()]

    @staticmethod
    async def _delete(conn: Conn, ids: list[int]) -> None:
        if ids:
            for table in ("restarts", "specs", "jobs"):
                await conn.execute(f"DELETE FROM {table} WHERE record_id = ANY(%s)", (ids,))

    async def _update(self, conn: Conn, rec: JobRecord) -> bool:
        """Write ``rec`` (row locked); returns whether it assigned a Slurm id (the save is then durable)."""
        now = time.time()
        cur = await conn.execute("SELECT job_id, superseded FROM jobs WHERE record_id=%s FOR UPDATE", (rec.record_id,))
        row = await cur.fetchone()
        if row is None or row["superseded"]:
            return False  # pruned, or frozen: Slurm's id now names another record's job
        assigns = bool(rec.job_id) and row["job_id"] != rec.job_id
        if assigns:
            reason = codec.superseded_reason(rec.job_id)
            await conn.execute(
                "UPDATE jobs SET superseded=true, updated=%s, finished=COALESCE(finished, %s), "
                "state=CASE WHEN NOT terminal THEN 'UNKNOWN' ELSE state END, "
                "observed=CASE WHEN NOT terminal THEN jsonb_set(observed, '{final_reason}', to_jsonb(%s::text)) "
                "ELSE observed END, terminal=true WHERE job_id=%s AND record_id<>%s AND NOT superseded",
                (now, now, reason, rec.job_id, rec.record_id),
            )
        finished = rec.terminal or rec.phase is Phase.FAILED
        await conn.execute(
            "UPDATE jobs SET job_id=%s, phase=%s, state=%s, observed=%s, terminal=%s, updated=%s, "
            "finished=CASE WHEN %s THEN COALESCE(finished, %s) END WHERE record_id=%s",
            (
                rec.job_id or None,
                rec.phase.value,
                rec.state.value,
                Jsonb(codec.observed(rec)),
                rec.terminal,
                now,
                finished,
                now,
                rec.record_id,
            ),
        )
        return assigns

    # -- JobStore ------------------------------------------------------------------------------

    def record_lock(self, record_id: int) -> PgRecordLock:
        """Serializes read-modify-write of one record, in this process and across replicas."""
        lock = self._record_locks.get(record_id)
        if lock is None:
            lock = PgRecordLock(self._lock_pool, record_id)
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
        """As SqliteJobStore.reserve; replicas reserving for one user take turns (an advisory lock)."""
        blob = codec.spec_bytes(spec)
        now = time.time()
        async with self._tx() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (pg_schema.LOCK_USER, user))
            if request_id:
                sql = f'SELECT {_ROW} FROM jobs WHERE "user"=%s AND request_id=%s'
                cur = await conn.execute(sql, (user, request_id))
                row = await cur.fetchone()
                if row is not None and row["phase"] != Phase.FAILED.value:
                    return (await self._records(conn, [row], with_spec=True))[0], False  # a retry is not a new job
                if row is not None:  # a failed attempt submitted nothing: this retry may submit
                    await self._delete(conn, [int(row["record_id"])])
            if limits is not None:
                prune = bounds.admit(
                    limits, await self._usage(conn, user), user=user, tasks=tasks, spec_bytes=len(blob)
                )
                if prune.needed:
                    await self._delete(conn, prune.choose(await self._oldest_finished(conn, user, prune.rows)))
            cur = await conn.execute(
                'INSERT INTO jobs("user", request_id, phase, tasks, spec_bytes, created, updated) '
                f"VALUES (%s,%s,%s,%s,%s,%s,%s) RETURNING {_ROW}",
                (user, request_id, Phase.SUBMITTING.value, tasks, len(blob), now, now),
            )
            row = await cur.fetchone()
            assert row is not None
            await conn.execute("INSERT INTO specs(record_id, spec) VALUES (%s, %s)", (row["record_id"], blob))
        return codec.record_from(row, row["observed"], [], spec), True

    async def save(self, rec: JobRecord) -> None:
        """Write ``rec``; durable when it gives the record its Slurm id (an acknowledged submit)."""
        async with self._tx() as conn:
            if not await self._update(conn, rec):
                await conn.execute("SET LOCAL synchronous_commit TO OFF")

    def save_behind(self, rec: JobRecord) -> None:
        """Never: a read may take another pooled connection, or another replica, before this commits."""
        return None

    async def record_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        async with self._tx(durable=False) as conn:
            cur = await conn.execute("SELECT superseded FROM jobs WHERE record_id=%s FOR UPDATE", (rec.record_id,))
            row = await cur.fetchone()
            if row is not None and not row["superseded"]:
                cur = await conn.execute("SELECT COUNT(*) AS n FROM restarts WHERE record_id=%s", (rec.record_id,))
                seq = await cur.fetchone()
                assert seq is not None
                await conn.execute(
                    "INSERT INTO restarts(record_id, seq, cause, nodes, time, step, exit_code, detail, nodes_before, "
                    "nodes_after, detected_by, phases) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                    (
                        rec.record_id,
                        int(seq["n"]),
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
                    ),
                )
            await self._update(conn, rec)
        rec.restarts.append(entry)

    async def amend_last_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        async with self._tx(durable=False) as conn:
            await conn.execute(
                "UPDATE restarts SET nodes_after=%s, detail=%s, phases=%s WHERE record_id=%s AND seq=%s AND EXISTS "
                "(SELECT 1 FROM jobs WHERE record_id=%s AND NOT superseded)",
                (
                    entry.nodes_after,
                    entry.detail,
                    json.dumps(entry.phases, sort_keys=True),
                    rec.record_id,
                    len(rec.restarts) - 1,
                    rec.record_id,
                ),
            )
        rec.restarts[-1] = entry

    async def get_by_record(self, record_id: int) -> JobRecord | None:
        rows = await self._query(f"SELECT {_ROW} FROM jobs WHERE record_id=%s", (record_id,), with_spec=True)
        return rows[0] if rows else None

    async def get_by_job_id(self, job_id: str, *, user: str | None = None, with_spec: bool = True) -> JobRecord | None:
        where, params = ('job_id=%s AND "user"=%s', (job_id, user)) if user is not None else ("job_id=%s", (job_id,))
        sql = f"SELECT {_ROW} FROM jobs WHERE {where} ORDER BY superseded, record_id DESC LIMIT 1"
        rows = await self._query(sql, params, with_spec=with_spec)
        return rows[0] if rows else None

    async def live(self) -> list[LiveRow]:
        async with self._pool.connection() as conn:
            sql = f"SELECT record_id, phase, job_id, updated FROM jobs WHERE {_LIVE} ORDER BY record_id"
            cur = await conn.execute(sql)
            rows = await cur.fetchall()
        return [LiveRow(int(r["record_id"]), Phase(r["phase"]), r["job_id"] or "", float(r["updated"])) for r in rows]

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
        """As SqliteJobStore.finished; ``name_glob`` is translated to an anchored regex (:func:`glob_to_regex`)."""
        clauses = ["phase=%s", "terminal", "finished >= %s", "finished < %s"]
        params: list[Any] = [Phase.SUBMITTED.value, since, until]
        if states:
            clauses.append("state = ANY(%s)")
            params.append(sorted(s.value for s in states))
        if user is not None:
            clauses.append('"user"=%s')
            params.append(user)
        if name_glob:
            clauses.append("(observed->>'name') ~ %s")
            params.append(glob_to_regex(name_glob))
        sql = f"SELECT {_ROW} FROM jobs WHERE {' AND '.join(clauses)} ORDER BY finished DESC, record_id DESC LIMIT %s"
        return await self._query(sql, (*params, limit), with_spec=False)

    async def list(
        self, *, user: str | None, include_finished: bool, limit: int, states: frozenset[JobState] = frozenset()
    ) -> list[JobRecord]:
        clauses = ["phase=%s"]
        params: list[Any] = [Phase.SUBMITTED.value]
        if states:
            clauses.append("state = ANY(%s)")
            params.append(sorted(s.value for s in states))
        if user is not None:
            clauses.append('"user"=%s')
            params.append(user)
        if not include_finished:
            clauses.append("NOT terminal")
        sql = f"SELECT {_ROW} FROM jobs WHERE {' AND '.join(clauses)} ORDER BY record_id DESC LIMIT %s"
        return await self._query(sql, (*params, limit), with_spec=False)

    async def prune_finished(self, *, older_than: float, keep_per_user: int) -> int:
        async with self._tx(durable=False) as conn:
            cur = await conn.execute(
                "SELECT record_id FROM (SELECT record_id, finished, ROW_NUMBER() OVER "
                f'(PARTITION BY "user" ORDER BY finished DESC, record_id DESC) AS rank FROM jobs WHERE {_FINISHED}) t '
                "WHERE finished < %s OR (%s > 0 AND rank > %s)",
                (older_than, keep_per_user, keep_per_user),
            )
            ids = [int(r["record_id"]) for r in await cur.fetchall()]
            await self._delete(conn, ids)
        return len(ids)

    # -- event log -----------------------------------------------------------------------------

    async def append_events(self, events: Sequence[EventRow]) -> builtins.list[int]:
        """One transaction; the advisory lock is taken before nextval and held to commit, so a seq
        is never committed after a larger one is visible."""
        if not events:
            return []
        seqs = []
        async with self._tx() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (pg_schema.LOCK_SPACE, pg_schema.LOCK_EVENTS))
            for e in events:
                cur = await conn.execute(
                    "INSERT INTO events(seq, record_id, type, previous_state, message, time, record) "
                    "VALUES (nextval('events_seq'), %s, %s, %s, %s, %s, %s::jsonb) RETURNING seq",
                    (
                        e.record.record_id,
                        e.type.value,
                        e.previous_state,
                        e.message,
                        e.time,
                        codec.event_record_json(e.record),
                    ),
                )
                row = await cur.fetchone()
                assert row is not None
                seqs.append(int(row["seq"]))
        return seqs

    async def events_after(self, seq: int, *, limit: int = 1000) -> builtins.list[LoggedEvent]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT seq, type, previous_state, message, time, record FROM events "
                "WHERE seq > %s ORDER BY seq LIMIT %s",
                (seq, limit),
            )
            rows = await cur.fetchall()
        return [
            LoggedEvent(
                int(r["seq"]),
                codec.event_record_from(r["record"]),
                EventType(r["type"]),
                r["previous_state"],
                r["message"],
                float(r["time"]),
            )
            for r in rows
        ]

    async def event_bounds(self) -> tuple[int, int]:
        async with self._pool.connection() as conn:
            cur = await conn.execute("SELECT COALESCE(MIN(seq), 0) AS lo, COALESCE(MAX(seq), 0) AS hi FROM events")
            row = await cur.fetchone()
        assert row is not None
        return int(row["lo"]), int(row["hi"])

    async def prune_events(self, *, older_than: float) -> int:
        async with self._tx(durable=False) as conn:
            cur = await conn.execute("DELETE FROM events WHERE time < %s", (older_than,))
            return cur.rowcount

    # -- leases --------------------------------------------------------------------------------

    async def acquire_lease(self, name: str, holder: str, ttl: float) -> Lease | None:
        """One statement: the row lock ON CONFLICT takes makes concurrent acquirers take turns, and
        the WHERE is re-checked on the row as the winner left it."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO leases AS l(name, holder, epoch, expires) "
                "VALUES (%(name)s, %(holder)s, 1, clock_timestamp() + make_interval(secs => %(ttl)s)) "
                "ON CONFLICT (name) DO UPDATE SET holder=excluded.holder, "
                "epoch=CASE WHEN l.holder=excluded.holder AND l.expires > clock_timestamp() THEN l.epoch "
                "ELSE l.epoch + 1 END, expires=clock_timestamp() + make_interval(secs => %(ttl)s) "
                "WHERE l.expires <= clock_timestamp() OR l.holder = excluded.holder "
                f"RETURNING {_LEASE}",
                {"name": name, "holder": holder, "ttl": float(ttl)},
            )
            return _lease(await cur.fetchone())

    async def renew_lease(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE leases SET expires=clock_timestamp() + make_interval(secs => %s) "
                "WHERE name=%s AND holder=%s AND epoch=%s AND expires > clock_timestamp()",
                (float(ttl), name, holder, epoch),
            )
            return cur.rowcount == 1

    async def current_lease(self, name: str) -> Lease | None:
        async with self._pool.connection() as conn:
            cur = await conn.execute(f"SELECT {_LEASE} FROM leases WHERE name=%s", (name,))
            return _lease(await cur.fetchone())

    async def release_lease(self, name: str, holder: str, epoch: int) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(
                "UPDATE leases SET expires=clock_timestamp() "
                "WHERE name=%s AND holder=%s AND epoch=%s AND expires > clock_timestamp()",
                (name, holder, epoch),
            )
