"""Migrations at open: a database of the release before Alembic is adopted with its rows, on both
databases; one at another version is refused, naming it. The old databases are built with frozen
copies of that release's schema code (tests/support/legacy_*_schema.py), never with the migrations
under test."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row
from sqlalchemy import inspect

from clusterctl.v1 import jobs_pb2
from clusterd.main import main
from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState
from clusterd.store import migrate
from clusterd.store.bounds import UserBounds
from clusterd.store.records import EventRow, Phase
from clusterd.store.store import Store, postgres_store, sqlite_store
from tests.clusterd.conftest import write_tokens
from tests.support import legacy_postgres_schema, legacy_sqlite_schema

OLD_SPEC = jobs_pb2.JobSpec(command=["train"], script="#!/bin/sh\n" + "x" * 100).SerializeToString()
OBSERVED = json.dumps({"name": "old", "final_reason": "completed", "nodes": ["n1"]})
EVENT = json.dumps(
    {
        "record_id": 7,
        "user": "alice",
        "request_id": "r",
        "job_id": "55",
        "phase": "submitted",
        "terminal": True,
        "superseded": False,
        "state": "COMPLETED",
        "tasks": 1,
        "created": 1.0,
        "observed": {"name": "old"},
        "restarts": [],
    }
)
# What the old release kept: alice's finished job 55 (with a restart and an event), her live job 56
# (4 tasks), and a lease. Parameters in each driver's style.
ROWS = [
    (
        "INSERT INTO jobs(record_id, {user}, request_id, job_id, phase, terminal, superseded, state, tasks, "
        "spec_bytes, created, updated, finished, observed) VALUES (7, 'alice', 'r', '55', 'submitted', {t}, {f}, "
        "'COMPLETED', 1, {n}, 1.0, 2.0, 2.0, {p})",
        (OBSERVED,),
    ),
    (
        "INSERT INTO jobs(record_id, {user}, request_id, job_id, phase, terminal, superseded, state, tasks, "
        "spec_bytes, created, updated, observed) VALUES (8, 'alice', 's', '56', 'submitted', {f}, {f}, "
        "'RUNNING', 4, {n}, 3.0, 3.0, {p})",
        ("{}",),
    ),
    ("INSERT INTO specs(record_id, spec) VALUES (7, {p})", (OLD_SPEC,)),
    ("INSERT INTO specs(record_id, spec) VALUES (8, {p})", (OLD_SPEC,)),
    (
        "INSERT INTO restarts(record_id, seq, cause, nodes, time, step, exit_code, detail) "
        "VALUES (7, 0, 'NODE_FAILURE', '[\"n1\"]', 1.5, 2, 0, 'lost n1')",
        (),
    ),
]


async def assert_adopted(store: Store) -> None:
    """The old rows read back, bounds count them, and new rows follow them."""
    old = await store.jobs.get_by_job_id("55")
    assert old is not None and old.record_id == 7 and old.terminal and old.state is JobState.COMPLETED
    assert old.name == "old" and old.nodes == ("n1",) and old.spec.command == ("train",)  # re-encoded (0003)
    assert [(e.cause, e.failed_nodes, e.detail) for e in old.restarts] == [("NODE_FAILURE", ("n1",), "lost n1")]
    assert [r.record_id for r in await store.jobs.live()] == [8]
    logged = await store.events.after(0)
    assert [(e.seq, e.type, e.record.job_id) for e in logged] == [(3, "SUBMITTED", "55")]
    lease = await store.leases.current("supervisor")
    assert lease is not None and lease.holder == "r1" and lease.epoch == 4 and 50 < lease.expires_in <= 60
    with pytest.raises(Exception, match="has 4 queued or running task"):
        await store.jobs.reserve("alice", "t", JobSpec(command=("x",)), tasks=2, limits=UserBounds(5))
    rec, created = await store.jobs.reserve("alice", "t", JobSpec(command=("x",)), limits=UserBounds(5))
    assert created and rec.record_id > 8
    rec.phase, rec.job_id = Phase.SUBMITTED, "55"  # Slurm reused the id: the old record is superseded
    await store.jobs.save(rec)
    assert (await store.jobs.get_by_job_id("55")).record_id == rec.record_id  # type: ignore[union-attr]
    assert await store.events.append([EventRow(rec, EventType.SUBMITTED, "", "", 9.0)]) == [4]
    assert await store.jobs.prune_finished(older_than=float("inf"), keep_per_user=0) == 1


async def test_a_sqlite_database_of_the_previous_release_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "state" / "clusterd.sqlite3"
    path.parent.mkdir()
    db = sqlite3.connect(path, isolation_level=None)
    legacy_sqlite_schema.migrate(db)
    for sql, params in ROWS:
        db.execute(sql.format(user="user", t=1, f=0, n=len(OLD_SPEC), p="?"), params)
    insert = (
        "INSERT INTO events(seq, record_id, type, previous_state, message, time, record) VALUES (?,7,?,'','',1.0,?)"
    )
    db.execute(insert, (2, "X", "{}"))
    db.execute("DELETE FROM events")  # a pruned event: AUTOINCREMENT never hands its seq out again
    db.execute(insert, (None, "SUBMITTED", EVENT))
    db.execute("INSERT INTO leases VALUES ('supervisor', 'r1', 4, ?)", (time.time() + 60,))
    db.close()
    store = sqlite_store(path)
    await store.open()
    try:
        tables = await store.db.read(lambda conn: set(inspect(conn).get_table_names()))
        assert "usage" not in tables and "alembic_version" in tables
        indexes = await store.db.read(lambda conn: {i["name"] for i in inspect(conn).get_indexes("restarts")})
        assert "restarts_time" in indexes  # a start reads the recent restarts without a scan
        await assert_adopted(store)
    finally:
        await store.close()
    again = sqlite_store(path)
    await again.open()  # nothing left to do
    await again.close()


async def test_a_postgresql_database_of_the_previous_release_is_adopted(pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True, row_factory=dict_row) as conn:
        assert await legacy_postgres_schema.migrate(conn) == [1, 2]
        for sql, params in ROWS:
            await conn.execute(sql.format(user='"user"', t="true", f="false", n=len(OLD_SPEC), p="%s"), params)  # type: ignore[arg-type]
        await conn.execute("SELECT setval(pg_get_serial_sequence('jobs', 'record_id'), 8)")  # as if it gave 7 and 8
        await conn.execute("SELECT setval('events_seq', 2)")
        await conn.execute(
            "INSERT INTO events VALUES (nextval('events_seq'), 7, 'SUBMITTED', '', '', 1.0, %s::jsonb)", (EVENT,)
        )
        await conn.execute("INSERT INTO leases VALUES ('supervisor', 'r1', 4, clock_timestamp() + interval '60 s')")
    store = postgres_store(pg_url, pool_min=1, pool_max=4)
    await store.open()
    try:
        with psycopg.connect(pg_url) as conn:
            version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            legacy = conn.execute("SELECT to_regclass('schema_migrations')").fetchone()
        assert version is not None and version[0] == migrate.head() and legacy == (None,)
        await assert_adopted(store)
    finally:
        await store.close()


async def test_a_sqlite_database_at_another_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    legacy_sqlite_schema.migrate(db)
    db.execute("PRAGMA user_version=5")
    db.close()
    store = sqlite_store(path)
    try:
        with pytest.raises(migrate.StoreVersionError, match="schema version 5, which this release cannot adopt"):
            await store.open()
    finally:
        await store.close()


async def test_a_new_database_is_made_at_the_newest_revision(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path / "new.sqlite3")
    await store.open()
    try:
        rows = await store.db.read(lambda conn: conn.exec_driver_sql("SELECT version_num FROM alembic_version").all())
        assert [r[0] for r in rows] == [migrate.head()]
    finally:
        await store.close()


@pytest.mark.usefixtures("root_logging")
def test_clusterd_exits_1_on_a_database_it_cannot_adopt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tokens(tokens := tmp_path / "tokens.toml")
    tokens.chmod(0o600)
    (state := tmp_path / "state").mkdir(mode=0o700)
    config = tmp_path / "clusterd.toml"
    config.write_text(
        f'listen = "unix:{tmp_path / "run" / "clusterd.sock"}"\nsocket_group = ""\n'
        f'state_dir = "{state}"\ntokens_file = "{tokens}"\n[slurm]\njob_root = "{tmp_path / "jobs"}"\n'
    )
    db = sqlite3.connect(state / "clusterd.sqlite3", isolation_level=None)
    legacy_sqlite_schema.migrate(db)
    db.execute("PRAGMA user_version=5")
    db.close()
    assert main(["serve", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "schema version 5, which this release cannot adopt" in err.splitlines()[-1]
