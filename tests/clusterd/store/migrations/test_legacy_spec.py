"""Specs earlier releases stored as serialized JobSpec messages: re-encoded once by revision 0003, in
the upgrade's transaction, on SQLite and PostgreSQL; a spec that cannot be read stops the upgrade
naming its record. (tests/clusterd/store/test_migrate.py adopts whole databases of the release
before Alembic, their protobuf specs included.)"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import psycopg
import pytest
from google.protobuf.duration_pb2 import Duration

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.api.spec_convert import spec_from_proto
from clusterd.main import main
from clusterd.model.spec import JobSpec
from clusterd.store import codec, migrate
from clusterd.store.migrations import MigrationError
from clusterd.store.migrations.legacy_spec import reencode
from clusterd.store.store import Store, postgres_store, sqlite_store
from tests.clusterd.conftest import write_tokens
from tests.support.wire import filled

UNREADABLE = b"\xff\xff\xff\xff"  # a truncated varint: no JobSpec, and not the JSON form either


def legacy() -> jobs_pb2.JobSpec:
    """A spec as an earlier release stored it, with nested, optional and repeated fields set."""
    return jobs_pb2.JobSpec(
        name="train",
        script="#!/bin/bash\n#SBATCH -N 2\nsrun python train.py\n",
        nodes=2,
        time_limit="1:00:00",
        environment={"MSG": "hello $(id)", "EMPTY": ""},
        checkpoint_uri="s3://bucket/run",
        request_id="r-1",
        sbatch_options=["--gpus-per-task=1"],
        export="NONE",
        restart_policy=jobs_pb2.RestartPolicy(
            max_restarts=0,
            on_preemption=False,
            fatal_exit_codes=[3],
            backoff=Duration(seconds=1, nanos=500_000_000),
            hang_timeout=Duration(seconds=90),
        ),
        placement=cluster_pb2.PlacementPreference(
            policy=cluster_pb2.PLACEMENT_POLICY_EXACT, switch_count=1, exclude_nodes=["node3"]
        ),
    )


def test_a_serialized_spec_becomes_the_stored_json_form() -> None:
    wire = legacy()
    stored = reencode(wire.SerializeToString())
    assert stored == codec.spec_bytes(spec_from_proto(wire))  # what the API would have stored
    assert codec.spec_from(stored).restart_policy.max_restarts == 0  # an explicit zero stays set
    assert reencode(jobs_pb2.JobSpec().SerializeToString()) == codec.spec_bytes(JobSpec())


def test_every_field_of_an_old_spec_is_carried_over() -> None:
    wire = filled(jobs_pb2.JobSpec())
    assert codec.spec_from(reencode(wire.SerializeToString())) == spec_from_proto(wire)


def test_the_current_form_is_kept_and_anything_else_is_refused() -> None:
    stored = codec.spec_bytes(spec_from_proto(legacy()))
    assert reencode(stored) == stored
    with pytest.raises(ValueError, match="not a serialized JobSpec"):
        reencode(UNREADABLE)


BEFORE = "0002"  # the revision before specs were JSON


async def _records(store: Store, count: int) -> list[int]:
    await store.open()
    try:
        return [
            (await store.jobs.reserve("alice", f"r{i}", JobSpec(command=("true",))))[0].record_id for i in range(count)
        ]
    finally:
        await store.close()


async def _sqlite_with(path: Path, blobs: list[bytes]) -> list[int]:
    """A database as the revision before this one left it, one record per (old-form) blob."""
    ids = await _records(sqlite_store(path), len(blobs))
    db = sqlite3.connect(path)
    for record_id, blob in zip(ids, blobs, strict=True):
        db.execute("UPDATE specs SET spec=? WHERE record_id=?", (blob, record_id))
        db.execute("UPDATE jobs SET spec_bytes=? WHERE record_id=?", (len(blob), record_id))
    db.execute("UPDATE alembic_version SET version_num=?", (BEFORE,))
    db.commit()
    db.close()
    return ids


async def test_sqlite_upgrade_reencodes_every_spec(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    (first, second) = await _sqlite_with(path, [legacy().SerializeToString(), b""])
    store = sqlite_store(path)
    await store.open()
    try:
        rec = await store.jobs.get_by_record(first)
        assert rec is not None and rec.spec == spec_from_proto(legacy())
        empty = await store.jobs.get_by_record(second)
        assert empty is not None and empty.spec == JobSpec()
    finally:
        await store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT version_num FROM alembic_version").fetchone() == (migrate.head(),)
    sizes = dict(db.execute("SELECT record_id, spec_bytes FROM jobs").fetchall())
    assert sizes == {first: len(codec.spec_bytes(rec.spec)), second: len(codec.spec_bytes(JobSpec()))}
    db.close()


async def test_sqlite_upgrade_stops_at_an_unreadable_spec_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    good = legacy().SerializeToString()
    (_, bad) = await _sqlite_with(path, [good, UNREADABLE])
    store = sqlite_store(path)
    try:
        with pytest.raises(MigrationError, match=f"^record {bad}: its stored spec cannot be read"):
            await store.open()
    finally:
        await store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT version_num FROM alembic_version").fetchone() == (BEFORE,)
    assert [bytes(b) for (b,) in db.execute("SELECT spec FROM specs ORDER BY record_id")] == [good, UNREADABLE]
    db.close()


@pytest.mark.usefixtures("root_logging")
def test_clusterd_exits_1_naming_the_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tokens(tokens := tmp_path / "tokens.toml")
    tokens.chmod(0o600)
    (state := tmp_path / "state").mkdir(mode=0o700)
    config = tmp_path / "clusterd.toml"
    config.write_text(
        f'listen = "unix:{tmp_path / "run" / "clusterd.sock"}"\nsocket_group = ""\n'
        f'state_dir = "{state}"\ntokens_file = "{tokens}"\n[slurm]\njob_root = "{tmp_path / "jobs"}"\n'
    )
    (bad,) = asyncio.run(_sqlite_with(state / "clusterd.sqlite3", [UNREADABLE]))  # serve runs its own loop
    assert main(["serve", "--config", str(config)]) == 1
    err = capsys.readouterr().err  # the service's own log lines come first
    assert err.endswith("the upgrade stopped, the database is unchanged\n") and "Traceback" not in err
    assert err.splitlines()[-1].startswith(f"clusterd: record {bad}: its stored spec cannot be read")


async def test_postgres_upgrade_reencodes_every_spec_and_stops_at_an_unreadable_one(pg_url: str) -> None:
    ids = await _records(postgres_store(pg_url, pool_min=1, pool_max=2), 2)

    def as_before(blobs: list[bytes]) -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for record_id, blob in zip(ids, blobs, strict=True):
                conn.execute("UPDATE specs SET spec=%s WHERE record_id=%s", (blob, record_id))
            conn.execute("UPDATE alembic_version SET version_num=%s", (BEFORE,))

    as_before([legacy().SerializeToString(), UNREADABLE])
    store = postgres_store(pg_url, pool_min=1, pool_max=2)
    try:
        with pytest.raises(MigrationError, match=f"^record {ids[1]}: its stored spec cannot be read"):
            await store.open()
    finally:
        await store.close()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (BEFORE,)
        (kept,) = conn.execute("SELECT spec FROM specs WHERE record_id=%s", (ids[0],)).fetchone()  # type: ignore[misc]
        assert bytes(kept) == legacy().SerializeToString()  # rolled back: nothing half converted

    as_before([legacy().SerializeToString(), b""])
    store = postgres_store(pg_url, pool_min=1, pool_max=2)
    await store.open()
    try:
        first, second = [await store.jobs.get_by_record(i) for i in ids]
        assert first is not None and first.spec == spec_from_proto(legacy())
        assert second is not None and second.spec == JobSpec()
    finally:
        await store.close()
