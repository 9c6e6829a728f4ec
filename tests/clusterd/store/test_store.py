"""Store on its own, SQLite and PostgreSQL alike: idempotent reservation, Slurm id reuse, compact rows,
per-user bounds, files."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Row, event, select

from clusterd.errors import ResourceExhausted
from clusterd.model.causes import Cause
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.store import codec
from clusterd.store.bounds import Usage, UserBounds
from clusterd.store.dialects import WRITE
from clusterd.store.jobs import usage
from clusterd.store.records import JobRecord, Phase, RestartEntry
from clusterd.store.store import Store, sqlite_store
from clusterd.store.tables import jobs


def spec(script_bytes: int = 0, **kw: object) -> JobSpec:
    return JobSpec(command=["hostname"], script="#!/bin/sh\n" + "x" * script_bytes, **kw)  # type: ignore[arg-type]


async def submitted(
    store: Store,
    user: str,
    job_id: str,
    *,
    request_id: str = "",
    tasks: int = 1,
    limits: UserBounds | None = None,
    size: int = 0,
) -> JobRecord:
    rec, created = await store.jobs.reserve(user, request_id, spec(size), tasks=tasks, limits=limits)
    assert created
    rec.job_id, rec.phase, rec.name = job_id, Phase.SUBMITTED, f"{user}-job"
    await store.jobs.save(rec)
    return rec


async def finish(store: Store, rec: JobRecord) -> None:
    rec.terminal, rec.state, rec.final_reason = True, JobState.COMPLETED, "completed"
    await store.jobs.save(rec)


async def test_reserve_is_idempotent_per_user_and_a_failed_attempt_may_retry(store: Store) -> None:
    first, created = await store.jobs.reserve("alice", "r1", spec())
    assert created and first.phase is Phase.SUBMITTING and first.spec.command == ("hostname",)
    again, created = await store.jobs.reserve("alice", "r1", spec())
    assert not created and again.record_id == first.record_id
    other, created = await store.jobs.reserve("bob", "r1", spec())  # request ids are per user
    assert created and other.record_id != first.record_id
    first.phase, first.error = Phase.FAILED, "sbatch said no"
    await store.jobs.save(first)
    retry, created = await store.jobs.reserve("alice", "r1", spec())
    assert created and retry.record_id != first.record_id and await store.jobs.get_by_record(first.record_id) is None


async def test_a_reused_slurm_id_is_a_new_job_and_the_old_record_is_superseded(store: Store) -> None:
    old = await submitted(store, "alice", "100")
    await store.jobs.record_restart(old, RestartEntry(Cause.NODE_FAILURE, ("node1",), 1.0, 3))
    new = await submitted(store, "bob", "100")  # the old UNIQUE(job_id) made this save raise, for good
    current = await store.jobs.get_by_job_id("100")
    assert current is not None and current.record_id == new.record_id and not current.superseded
    mine = await store.jobs.get_by_job_id("100", user="alice")
    assert mine is not None and mine.record_id == old.record_id
    assert mine.superseded and mine.terminal and mine.state is JobState.UNKNOWN
    assert "gave job id 100 to a newer job" in mine.final_reason and len(mine.restarts) == 1
    assert [r.record_id for r in await store.jobs.live()] == [new.record_id]  # the poller follows the new job only
    # A stale in-memory copy of the old record cannot bring it back or add restarts.
    old.terminal, old.state = False, JobState.RUNNING
    await store.jobs.save(old)
    await store.jobs.record_restart(old, RestartEntry(Cause.MANUAL_REQUEUE, (), 2.0, 3))
    frozen = await store.jobs.get_by_record(old.record_id)
    assert frozen is not None and frozen.terminal and frozen.state is JobState.UNKNOWN and len(frozen.restarts) == 1
    # The same user getting the id again: their newest record is the one they reach.
    newest = await submitted(store, "alice", "100")
    reached = await store.jobs.get_by_job_id("100", user="alice")
    assert reached is not None and reached.record_id == newest.record_id
    bob = await store.jobs.get_by_record(new.record_id)
    assert bob is not None and bob.superseded


async def test_lists_are_compact_rows_with_restarts(store: Store) -> None:
    a = await submitted(store, "alice", "1", size=10_000)
    await store.jobs.record_restart(a, RestartEntry(Cause.PREEMPTED, (), 1.0, -1))
    b = await submitted(store, "alice", "2")
    await finish(store, b)
    await submitted(store, "bob", "3")
    rows = await store.jobs.list(user="alice", include_finished=True, limit=10)
    assert [r.job_id for r in rows] == ["2", "1"]
    assert all(r.spec == JobSpec() for r in rows)  # specs are never decoded for a list
    assert rows[1].name == "alice-job" and [e.cause for e in rows[1].restarts] == ["PREEMPTED"]
    assert [r.job_id for r in await store.jobs.list(user="alice", include_finished=False, limit=10)] == ["1"]
    done = await store.jobs.list(user=None, include_finished=True, limit=10, states=frozenset({JobState.COMPLETED}))
    assert [r.job_id for r in done] == ["2"]
    full = await store.jobs.get_by_job_id("1")
    assert full is not None and len(full.spec.script) > 10_000


async def test_live_tasks_bound_counts_array_tasks_and_lets_retries_through(store: Store) -> None:
    limits = UserBounds(max_live_tasks=10)
    await submitted(store, "alice", "1", tasks=8, request_id="a", limits=limits)
    with pytest.raises(
        ResourceExhausted,
        match=r"has 8 queued or running task\(s\) and this job adds 3; "
        r"the limit is 10 per user \(limits.max_jobs_per_user\)",
    ):
        await store.jobs.reserve("alice", "b", spec(), tasks=3, limits=limits)
    rec, created = await store.jobs.reserve("alice", "a", spec(), tasks=3, limits=limits)  # a retry submits nothing
    assert not created and rec.job_id == "1" and rec.tasks == 8
    await submitted(store, "alice", "2", tasks=2, limits=limits)
    await submitted(store, "bob", "3", tasks=10, limits=limits)  # bounds are per user


async def test_spec_bytes_bound_prunes_finished_first_then_refuses(store: Store) -> None:
    limits = UserBounds(max_spec_bytes=25_000)
    old = await submitted(store, "alice", "1", size=10_000, limits=limits)
    await finish(store, old)
    live = await submitted(store, "alice", "2", size=10_000, limits=limits)
    await submitted(store, "alice", "3", size=10_000, limits=limits)  # fits once the finished one goes
    assert await store.jobs.get_by_record(old.record_id) is None
    assert await store.jobs.get_by_record(live.record_id) is not None
    with pytest.raises(ResourceExhausted, match=r"limits.max_spec_bytes_per_user"):
        await store.jobs.reserve("alice", "", spec(10_000), limits=limits)


async def test_finished_records_are_kept_by_count_and_age(store: Store) -> None:
    limits = UserBounds(max_finished=2)
    recs = [await submitted(store, "alice", str(i), limits=limits) for i in range(4)]
    for rec in recs[:3]:
        await finish(store, rec)
    await submitted(store, "alice", "9", limits=limits)  # reserving keeps at most 2 finished
    kept = await store.jobs.list(user="alice", include_finished=True, limit=10)
    assert [r.job_id for r in kept] == ["9", "3", "2", "1"]
    for i in range(3):
        await submitted(store, "bob", f"b{i}")
    for rec in await store.jobs.list(user="bob", include_finished=True, limit=10):
        await finish(store, rec)
    assert await store.jobs.prune_finished(older_than=0.0, keep_per_user=1) == 3  # alice's "1", bob's b0 and b1
    assert await store.jobs.prune_finished(older_than=float("inf"), keep_per_user=0) == 2  # every finished one
    left = await store.jobs.list(user=None, include_finished=True, limit=10)
    assert sorted(r.job_id for r in left) == ["3", "9"]  # live records are never pruned


def durable_commits(store: Store) -> list[bool]:
    """Whether each write transaction from now on commits durably: SQLite's synchronous level as each
    one begins (FULL syncs the WAL at commit), PostgreSQL's synchronous_commit turned off for one."""
    seen: list[bool] = []

    def begin(conn: Connection) -> None:  # after the dialect's own begin hook
        if conn.get_execution_options().get(WRITE):
            level = conn.connection.driver_connection.execute("PRAGMA synchronous").fetchone()[0]
            seen.append(level == 2)  # FULL

    def statement(conn: object, cursor: object, sql: str, *args: object) -> None:
        if "synchronous_commit TO OFF" in sql:
            seen.append(False)

    if store.db.dialect.name == "sqlite":
        event.listen(store.db.dialect.engine, "begin", begin)
    else:
        event.listen(store.db.dialect.engine, "before_cursor_execute", statement)
    return seen


async def test_the_writes_a_submit_acknowledges_commit_durably(store: Store) -> None:
    """The reservation and the save that records Slurm's id are durable; a poller update
    (re-derived from Slurm at the next poll) is not."""
    seen = durable_commits(store)
    rec = await submitted(store, "alice", "1")
    rec.state = JobState.RUNNING
    await store.jobs.save(rec)
    if store.db.dialect.name == "sqlite":
        assert seen == [True, True, False]  # the reservation, the save of Slurm's id, the poller's save
    else:
        assert seen == [False]  # only the last save turns synchronous_commit off


async def test_sqlite_group_commits_concurrent_writes(embedded: Store) -> None:
    """16 reservations at once share commits: fewer write transactions than writes."""
    began: list[bool] = []
    event.listen(
        embedded.db.dialect.engine,
        "begin",
        lambda conn: began.append(True) if conn.get_execution_options().get(WRITE) else None,
    )
    await asyncio.gather(*(embedded.jobs.reserve(f"user{i}", "", spec(0)) for i in range(16)))
    assert 1 <= len(began) < 16 and len(await embedded.jobs.live()) == 16


async def test_concurrent_reservations_fail_alone(store: Store) -> None:
    """16 reservations at once; the one refused by its bound is undone alone while the others stand."""
    tight = UserBounds(max_live_tasks=1)
    await store.jobs.reserve("user3", "", spec(0), limits=tight)
    calls = [store.jobs.reserve(f"user{i}", "", spec(0)) for i in range(15) if i != 3]
    calls.insert(7, store.jobs.reserve("user3", "", spec(0), limits=tight))  # user3's second: over its bound
    results = await asyncio.gather(*calls, return_exceptions=True)
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 1 and isinstance(refused[0], ResourceExhausted)
    assert len(await store.jobs.live()) == 15


async def test_files_are_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    db = state / "clusterd.sqlite3"
    db.touch(mode=0o644)
    store = sqlite_store(db)
    await store.open()
    try:
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    finally:
        await store.close()


def test_adoption_needs_the_tag_and_the_owner() -> None:
    rec = JobRecord(record_id=12, user="alice", request_id="", spec=spec(), phase=Phase.SUBMITTING, created=0.0)
    tagged = SlurmJob(job_id="1", name="j", user="alice", state=JobState.PENDING, comment="clusterctl-record:12")
    assert rec.adopts(tagged)
    assert not rec.adopts(
        SlurmJob(job_id="2", name="j", user="mallory", state=JobState.PENDING, comment="clusterctl-record:12")
    )
    assert not rec.adopts(SlurmJob(job_id="3", name="j", user="alice", state=JobState.PENDING, comment="x"))


async def test_finished_filters_by_window_state_user_and_name_glob(store: Store) -> None:
    for user, job_id, name in (("alice", "1", "train-1"), ("alice", "2", "eval"), ("bob", "3", "train-2")):
        rec = await submitted(store, user, job_id)
        rec.name = name
        await finish(store, rec)
    live = await submitted(store, "alice", "4")
    assert live.job_id == "4"
    everything = await store.jobs.finished(user=None, since=0.0, until=float("inf"), limit=10)
    assert [r.job_id for r in everything] == ["3", "2", "1"] and all(r.spec == JobSpec() for r in everything)
    glob = await store.jobs.finished(user=None, since=0.0, until=float("inf"), limit=10, name_glob="train-[0-9]")
    assert [r.job_id for r in glob] == ["3", "1"]
    mine = await store.jobs.finished(user="alice", since=0.0, until=float("inf"), limit=10, name_glob="*")
    assert [r.job_id for r in mine] == ["2", "1"]
    failed = await store.jobs.finished(
        user=None, since=0.0, until=float("inf"), limit=10, states=frozenset({JobState.FAILED})
    )
    assert failed == []
    assert await store.jobs.finished(user=None, since=0.0, until=1.0, limit=10) == []


def expected_usage(rows: Sequence[Row[Any]], user: str) -> Usage:
    """A user's usage summed in Python from every one of their records."""
    mine = [r for r in rows if r.user == user]
    live = [r for r in mine if not r.terminal and r.phase != "failed"]
    done = [r for r in mine if r not in live]
    return Usage(
        sum(r.tasks for r in live), sum(r.spec_bytes for r in live), len(done), sum(r.spec_bytes for r in done)
    )


async def assert_usage_counted(store: Store) -> None:
    """The store's indexed sum equals what summing every record gives, for every user."""
    stmt = select(jobs.c.user, jobs.c.terminal, jobs.c.phase, jobs.c.tasks, jobs.c.spec_bytes)
    rows = await store.db.read(lambda conn: conn.execute(stmt).all())
    for user in ("alice", "bob", "carol"):
        got = await store.db.read(lambda conn, user=user: usage(conn, user))  # type: ignore[misc]
        assert got == expected_usage(rows, user), user


async def test_usage_follows_every_kind_of_write(store: Store) -> None:
    array = await submitted(store, "alice", "1", tasks=4, size=500)
    plain = await submitted(store, "alice", "2", request_id="r2")
    await submitted(store, "bob", "3", size=100)
    await assert_usage_counted(store)
    await finish(store, array)
    plain.phase, plain.error = Phase.FAILED, "sbatch said no"
    await store.jobs.save(plain)
    await assert_usage_counted(store)
    retry, created = await store.jobs.reserve("alice", "r2", spec(), limits=UserBounds(max_finished=100))
    assert created  # the failed attempt's record is deleted
    await assert_usage_counted(store)
    await submitted(store, "bob", "1", size=50)  # alice's finished record is superseded, not deleted
    await assert_usage_counted(store)
    assert await store.jobs.prune_finished(older_than=float("inf"), keep_per_user=0) > 0
    await assert_usage_counted(store)
    alice = await store.db.read(lambda conn: usage(conn, "alice"))
    assert alice == Usage(1, len(codec.spec_bytes(retry.spec)), 0, 0)
    assert await store.db.read(lambda conn: usage(conn, "carol")) == Usage(0, 0, 0, 0)
