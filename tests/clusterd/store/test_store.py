"""JobStore on its own, SQLite and PostgreSQL alike: idempotent reservation, Slurm id reuse, compact rows,
per-user bounds, files."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from clusterd.api.spec_convert import spec_to_proto
from clusterd.errors import ResourceExhausted
from clusterd.model.causes import Cause
from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.store import codec, schema
from clusterd.store.base import JobStore
from clusterd.store.bounds import Usage, UserBounds
from clusterd.store.records import EventRow, JobRecord, Phase, RestartEntry
from clusterd.store.sqlite import SqliteJobStore


def spec(script_bytes: int = 0, **kw: object) -> JobSpec:
    return JobSpec(command=["hostname"], script="#!/bin/sh\n" + "x" * script_bytes, **kw)  # type: ignore[arg-type]


async def submitted(
    store: JobStore,
    user: str,
    job_id: str,
    *,
    request_id: str = "",
    tasks: int = 1,
    limits: UserBounds | None = None,
    size: int = 0,
) -> JobRecord:
    rec, created = await store.reserve(user, request_id, spec(size), tasks=tasks, limits=limits)
    assert created
    rec.job_id, rec.phase, rec.name = job_id, Phase.SUBMITTED, f"{user}-job"
    await store.save(rec)
    return rec


async def finish(store: JobStore, rec: JobRecord) -> None:
    rec.terminal, rec.state, rec.final_reason = True, JobState.COMPLETED, "completed"
    await store.save(rec)


async def test_reserve_is_idempotent_per_user_and_a_failed_attempt_may_retry(store: JobStore) -> None:
    first, created = await store.reserve("alice", "r1", spec())
    assert created and first.phase is Phase.SUBMITTING and first.spec.command == ("hostname",)
    again, created = await store.reserve("alice", "r1", spec())
    assert not created and again.record_id == first.record_id
    other, created = await store.reserve("bob", "r1", spec())  # request ids are per user
    assert created and other.record_id != first.record_id
    first.phase, first.error = Phase.FAILED, "sbatch said no"
    await store.save(first)
    retry, created = await store.reserve("alice", "r1", spec())
    assert created and retry.record_id != first.record_id and await store.get_by_record(first.record_id) is None


async def test_a_reused_slurm_id_is_a_new_job_and_the_old_record_is_superseded(store: JobStore) -> None:
    old = await submitted(store, "alice", "100")
    await store.record_restart(old, RestartEntry(Cause.NODE_FAILURE, ("node1",), 1.0, 3))
    new = await submitted(store, "bob", "100")  # the old UNIQUE(job_id) made this save raise, for good
    current = await store.get_by_job_id("100")
    assert current is not None and current.record_id == new.record_id and not current.superseded
    mine = await store.get_by_job_id("100", user="alice")
    assert mine is not None and mine.record_id == old.record_id
    assert mine.superseded and mine.terminal and mine.state is JobState.UNKNOWN
    assert "gave job id 100 to a newer job" in mine.final_reason and len(mine.restarts) == 1
    assert [r.record_id for r in await store.live()] == [new.record_id]  # the poller follows the new job only
    # A stale in-memory copy of the old record cannot bring it back or add restarts.
    old.terminal, old.state = False, JobState.RUNNING
    await store.save(old)
    await store.record_restart(old, RestartEntry(Cause.MANUAL_REQUEUE, (), 2.0, 3))
    frozen = await store.get_by_record(old.record_id)
    assert frozen is not None and frozen.terminal and frozen.state is JobState.UNKNOWN and len(frozen.restarts) == 1
    # The same user getting the id again: their newest record is the one they reach.
    newest = await submitted(store, "alice", "100")
    reached = await store.get_by_job_id("100", user="alice")
    assert reached is not None and reached.record_id == newest.record_id
    bob = await store.get_by_record(new.record_id)
    assert bob is not None and bob.superseded


async def test_lists_are_compact_rows_with_restarts(store: JobStore) -> None:
    a = await submitted(store, "alice", "1", size=10_000)
    await store.record_restart(a, RestartEntry(Cause.PREEMPTED, (), 1.0, -1))
    b = await submitted(store, "alice", "2")
    await finish(store, b)
    await submitted(store, "bob", "3")
    rows = await store.list(user="alice", include_finished=True, limit=10)
    assert [r.job_id for r in rows] == ["2", "1"]
    assert all(r.spec == JobSpec() for r in rows)  # specs are never decoded for a list
    assert rows[1].name == "alice-job" and [e.cause for e in rows[1].restarts] == ["PREEMPTED"]
    assert [r.job_id for r in await store.list(user="alice", include_finished=False, limit=10)] == ["1"]
    done = await store.list(user=None, include_finished=True, limit=10, states=frozenset({JobState.COMPLETED}))
    assert [r.job_id for r in done] == ["2"]
    full = await store.get_by_job_id("1")
    assert full is not None and len(full.spec.script) > 10_000


async def test_live_tasks_bound_counts_array_tasks_and_lets_retries_through(store: JobStore) -> None:
    limits = UserBounds(max_live_tasks=10)
    await submitted(store, "alice", "1", tasks=8, request_id="a", limits=limits)
    with pytest.raises(
        ResourceExhausted,
        match=r"has 8 queued or running task\(s\) and this job adds 3; "
        r"the limit is 10 per user \(limits.max_jobs_per_user\)",
    ):
        await store.reserve("alice", "b", spec(), tasks=3, limits=limits)
    rec, created = await store.reserve("alice", "a", spec(), tasks=3, limits=limits)  # a retry submits nothing
    assert not created and rec.job_id == "1" and rec.tasks == 8
    await submitted(store, "alice", "2", tasks=2, limits=limits)
    await submitted(store, "bob", "3", tasks=10, limits=limits)  # bounds are per user


async def test_spec_bytes_bound_prunes_finished_first_then_refuses(store: JobStore) -> None:
    limits = UserBounds(max_spec_bytes=25_000)
    old = await submitted(store, "alice", "1", size=10_000, limits=limits)
    await finish(store, old)
    live = await submitted(store, "alice", "2", size=10_000, limits=limits)
    await submitted(store, "alice", "3", size=10_000, limits=limits)  # fits once the finished one goes
    assert await store.get_by_record(old.record_id) is None
    assert await store.get_by_record(live.record_id) is not None
    with pytest.raises(ResourceExhausted, match=r"limits.max_spec_bytes_per_user"):
        await store.reserve("alice", "", spec(10_000), limits=limits)


async def test_finished_records_are_kept_by_count_and_age(store: JobStore) -> None:
    limits = UserBounds(max_finished=2)
    recs = [await submitted(store, "alice", str(i), limits=limits) for i in range(4)]
    for rec in recs[:3]:
        await finish(store, rec)
    await submitted(store, "alice", "9", limits=limits)  # reserving keeps at most 2 finished
    kept = await store.list(user="alice", include_finished=True, limit=10)
    assert [r.job_id for r in kept] == ["9", "3", "2", "1"]
    for i in range(3):
        await submitted(store, "bob", f"b{i}")
    for rec in await store.list(user="bob", include_finished=True, limit=10):
        await finish(store, rec)
    assert await store.prune_finished(older_than=0.0, keep_per_user=1) == 3  # alice's "1", bob's b0 and b1
    assert await store.prune_finished(older_than=float("inf"), keep_per_user=0) == 2  # every finished one
    left = await store.list(user=None, include_finished=True, limit=10)
    assert sorted(r.job_id for r in left) == ["3", "9"]  # live records are never pruned


def count_syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The fds the store fsyncs itself from now on (SQLite's own syncs happen in C, unseen)."""
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


async def test_the_writes_a_submit_acknowledges_are_synced_to_disk(
    sqlite_store: SqliteJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reservation and the save that records Slurm's id sync the WAL before they return; a
    poller update (re-derived from Slurm at the next poll) does not."""
    synced = count_syncs(monkeypatch)
    rec = await submitted(sqlite_store, "alice", "1")
    assert len(synced) == 2
    rec.state = JobState.RUNNING
    await sqlite_store.save(rec)
    assert len(synced) == 2


async def test_concurrent_writes_share_a_commit_and_fail_alone(
    sqlite_store: SqliteJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit: 16 reservations at once take fewer syncs than 16, and one refused by its
    bound is undone alone while the others stand."""
    synced = count_syncs(monkeypatch)
    tight = UserBounds(max_live_tasks=1)
    calls = [sqlite_store.reserve(f"user{i}", "", spec(0)) for i in range(15)]
    calls.insert(7, sqlite_store.reserve("user3", "", spec(0), limits=tight))  # user3's second: over its bound
    results = await asyncio.gather(*calls, return_exceptions=True)
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 1 and isinstance(refused[0], ResourceExhausted)
    assert len(synced) < 16
    kept = [r for r in results if not isinstance(r, BaseException)]
    assert len(await sqlite_store.live()) == 15 == len({rec.user for rec, _ in kept})


async def test_a_save_behind_is_seen_by_every_later_read_or_refused(store: JobStore) -> None:
    """SQLite's one store thread takes work in order, so a read asked for right after the save was
    queued, before its commit, already sees it; PostgreSQL cannot promise that and says so (None)."""
    rec, _ = await store.reserve("alice", "r1", spec())
    rec.job_id, rec.phase = "7", Phase.SUBMITTED
    saved = store.save_behind(rec)
    if isinstance(store, SqliteJobStore):
        assert saved is not None and not saved.done()
        seen = await store.get_by_job_id("7")  # committed by now (its sync may still be under way)
        assert seen is not None and seen.phase is Phase.SUBMITTED
        await saved
    else:
        assert saved is None


async def test_the_store_thread_commits_the_next_group_while_a_sync_runs(
    sqlite_store: SqliteJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A durable write hears back only after a sync begun after its commit; the sync has a thread
    of its own, so meanwhile another group commits and answers (and reads see the first)."""
    running = await submitted(sqlite_store, "alice", "1")
    syncing, release = threading.Event(), threading.Event()
    real = os.fsync

    def slow_fsync(fd: int) -> None:
        syncing.set()
        release.wait(10)
        real(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    reserve = asyncio.create_task(sqlite_store.reserve("bob", "r1", spec()))
    assert await asyncio.to_thread(syncing.wait, 10)
    running.state = JobState.RUNNING
    await sqlite_store.save(running)  # not durable: its group answers while the sync still runs
    assert not reserve.done() and len(await sqlite_store.live()) == 2
    release.set()
    rec, created = await reserve
    assert created and rec.user == "bob"


async def test_a_failed_sync_fails_the_writes_that_waited_for_it(
    sqlite_store: SqliteJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output error"):
        await sqlite_store.reserve("alice", "r1", spec())
    monkeypatch.undo()
    assert (await sqlite_store.reserve("alice", "r2", spec()))[1]  # the next sync works again


async def test_files_are_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    db = state / "clusterd.sqlite3"
    db.touch(mode=0o644)
    store = SqliteJobStore(db)
    try:
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    finally:
        await store.close()


async def test_version_1_databases_are_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE jobs (record_id INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT NOT NULL,
            request_id TEXT NOT NULL, job_id TEXT, phase TEXT NOT NULL, spec BLOB NOT NULL,
            observed TEXT NOT NULL DEFAULT '{}', terminal INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL,
            updated REAL NOT NULL);
        CREATE UNIQUE INDEX jobs_request ON jobs(user, request_id) WHERE request_id != '';
        CREATE UNIQUE INDEX jobs_job_id ON jobs(job_id) WHERE job_id IS NOT NULL;
        CREATE INDEX jobs_live ON jobs(terminal);
        CREATE TABLE restarts (record_id INTEGER NOT NULL REFERENCES jobs(record_id), seq INTEGER NOT NULL,
            cause TEXT NOT NULL, nodes TEXT NOT NULL, time REAL NOT NULL, step INTEGER NOT NULL,
            exit_code INTEGER NOT NULL, detail TEXT NOT NULL, PRIMARY KEY (record_id, seq));
    """)
    db.execute(
        "INSERT INTO jobs VALUES (7, 'alice', 'r', '55', 'submitted', ?, ?, 1, 1.0, 2.0)",
        (spec_to_proto(spec(100)).SerializeToString(), '{"state": "COMPLETED", "name": "old"}'),
    )
    db.execute("INSERT INTO restarts VALUES (7, 0, 'NODE_FAILURE', '[\"n1\"]', 1.5, 2, 0, '')")
    db.commit()
    db.close()
    store = SqliteJobStore(path)
    try:
        rec = await store.get_by_job_id("55")
        assert rec is not None and rec.record_id == 7 and rec.state is JobState.COMPLETED and rec.terminal
        assert rec.name == "old" and rec.spec == spec(100) and rec.restarts[0].failed_nodes == ("n1",)
        assert store._db.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        restarts_sql = store._db.execute("SELECT sql FROM sqlite_master WHERE name='restarts'").fetchone()[0]
        assert "REFERENCES jobs(" in restarts_sql
        await submitted(store, "bob", "55")  # a reused id no longer collides
        assert_usage_counted(store)
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


async def test_finished_filters_by_window_state_user_and_name_glob(store: JobStore) -> None:
    for user, job_id, name in (("alice", "1", "train-1"), ("alice", "2", "eval"), ("bob", "3", "train-2")):
        rec = await submitted(store, user, job_id)
        rec.name = name
        await finish(store, rec)
    live = await submitted(store, "alice", "4")
    assert live.job_id == "4"
    everything = await store.finished(user=None, since=0.0, until=float("inf"), limit=10)
    assert [r.job_id for r in everything] == ["3", "2", "1"] and all(r.spec == JobSpec() for r in everything)
    glob = await store.finished(user=None, since=0.0, until=float("inf"), limit=10, name_glob="train-[0-9]")
    assert [r.job_id for r in glob] == ["3", "1"]
    mine = await store.finished(user="alice", since=0.0, until=float("inf"), limit=10, name_glob="*")
    assert [r.job_id for r in mine] == ["2", "1"]
    failed = await store.finished(
        user=None, since=0.0, until=float("inf"), limit=10, states=frozenset({JobState.FAILED})
    )
    assert failed == []
    assert await store.finished(user=None, since=0.0, until=1.0, limit=10) == []


async def test_version_4_databases_gain_the_event_log_and_leases(tmp_path: Path) -> None:
    path = tmp_path / "v4.sqlite3"
    store = SqliteJobStore(path)
    kept = await submitted(store, "alice", "5")
    await store.close()
    db = sqlite3.connect(path)
    db.executescript("DROP TABLE events; DROP TABLE leases; PRAGMA user_version=4;")
    db.close()
    store = SqliteJobStore(path)
    try:
        assert store._db.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        assert await store.get_by_record(kept.record_id) is not None
        assert await store.append_events([EventRow(kept, EventType.SUBMITTED, "", "", 1.0)]) == [1]
        assert await store.acquire_lease("supervisor", "r1", 5.0) is not None
    finally:
        await store.close()


def assert_usage_counted(store: SqliteJobStore) -> None:
    """The usage rows the triggers keep equal what summing every record gives, for every user."""
    live, done = schema.live(), schema.finished()
    counted = {
        row[0]: tuple(row[1:])
        for row in store._db.execute(
            f"SELECT user, SUM({live} * tasks), SUM({live} * spec_bytes), SUM({done}), SUM({done} * spec_bytes) "
            "FROM jobs GROUP BY user"
        )
    }
    kept = {row[0]: tuple(row[1:]) for row in store._db.execute("SELECT * FROM usage") if any(row[1:])}
    assert kept == {user: sums for user, sums in counted.items() if any(sums)}


async def test_usage_rows_follow_every_kind_of_write(sqlite_store: SqliteJobStore) -> None:
    store = sqlite_store
    array = await submitted(store, "alice", "1", tasks=4, size=500)
    plain = await submitted(store, "alice", "2", request_id="r2")
    await submitted(store, "bob", "3", size=100)
    assert_usage_counted(store)
    await finish(store, array)
    plain.phase, plain.error = Phase.FAILED, "sbatch said no"
    await store.save(plain)
    assert_usage_counted(store)
    retry, created = await store.reserve("alice", "r2", spec(), limits=UserBounds(max_finished=100))
    assert created  # the failed attempt's record is deleted
    assert_usage_counted(store)
    await submitted(store, "bob", "1", size=50)  # alice's finished record is superseded, not deleted
    assert_usage_counted(store)
    assert await store.prune_finished(older_than=float("inf"), keep_per_user=0) > 0
    assert_usage_counted(store)
    assert store._usage("alice") == Usage(1, len(codec.spec_bytes(retry.spec)), 0, 0)
    assert store._usage("carol") == Usage(0, 0, 0, 0)


async def test_version_5_databases_count_usage_from_their_records(tmp_path: Path) -> None:
    path = tmp_path / "v5.sqlite3"
    store = SqliteJobStore(path)
    await submitted(store, "alice", "5", tasks=3, size=200)
    await finish(store, await submitted(store, "alice", "6"))
    await store.close()
    db = sqlite3.connect(path)
    db.executescript(
        "DROP TRIGGER usage_insert; DROP TRIGGER usage_delete; DROP TRIGGER usage_update; "
        "DROP TABLE usage; PRAGMA user_version=5;"
    )
    db.close()
    store = SqliteJobStore(path)
    try:
        assert store._db.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        assert_usage_counted(store)
        usage = store._usage("alice")
        assert (usage.live_tasks, usage.finished) == (3, 1)
    finally:
        await store.close()
