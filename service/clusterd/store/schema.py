"""The SQLite schema of the job store and its migrations.

Specs live in their own table: a job row stays a few hundred bytes however large its spec, so
listing, counting and polling never read (or walk the overflow pages of) multi-MiB blobs. A Slurm
job id is not a key: Slurm reuses ids when slurmctld loses its state or FirstJobId is reset, so a
record is its ``record_id``, and of the records that hold one Slurm id exactly one is current
(``superseded=0``), which a partial UNIQUE index enforces.
"""

from __future__ import annotations

import sqlite3

VERSION = 5

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    record_id   INTEGER PRIMARY KEY AUTOINCREMENT,
    user        TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    job_id      TEXT,
    phase       TEXT NOT NULL,
    terminal    INTEGER NOT NULL DEFAULT 0,
    superseded  INTEGER NOT NULL DEFAULT 0,
    state       TEXT NOT NULL DEFAULT 'PENDING',
    tasks       INTEGER NOT NULL DEFAULT 1,
    spec_bytes  INTEGER NOT NULL DEFAULT 0,
    created     REAL NOT NULL,
    updated     REAL NOT NULL,
    finished    REAL,
    observed    TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS specs (
    record_id   INTEGER PRIMARY KEY,
    spec        BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_request ON jobs(user, request_id) WHERE request_id != '';
CREATE UNIQUE INDEX IF NOT EXISTS jobs_current ON jobs(job_id) WHERE job_id IS NOT NULL AND superseded = 0;
CREATE INDEX IF NOT EXISTS jobs_job_id ON jobs(job_id, record_id);
CREATE INDEX IF NOT EXISTS jobs_live ON jobs(terminal, phase);
CREATE INDEX IF NOT EXISTS jobs_user ON jobs(user, terminal, record_id);
CREATE TABLE IF NOT EXISTS restarts (
    record_id   INTEGER NOT NULL REFERENCES jobs(record_id),
    seq         INTEGER NOT NULL,
    cause       TEXT NOT NULL,
    nodes       TEXT NOT NULL,
    time        REAL NOT NULL,
    step        INTEGER NOT NULL,
    exit_code   INTEGER NOT NULL,
    detail      TEXT NOT NULL,
    nodes_before INTEGER NOT NULL DEFAULT 0,
    nodes_after INTEGER NOT NULL DEFAULT 0,
    detected_by TEXT NOT NULL DEFAULT '',
    phases      TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (record_id, seq)
);
CREATE TABLE IF NOT EXISTS events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id   INTEGER NOT NULL,
    type        TEXT NOT NULL,
    previous_state TEXT NOT NULL,
    message     TEXT NOT NULL,
    time        REAL NOT NULL,
    record      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_time ON events(time);
CREATE TABLE IF NOT EXISTS leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    epoch       INTEGER NOT NULL,
    expires     REAL NOT NULL
);
"""

# Version 1 kept the spec inline and made job_id UNIQUE (which wedged on a reused Slurm id).
_FROM_V1 = """
DROP INDEX IF EXISTS jobs_request;
DROP INDEX IF EXISTS jobs_job_id;
DROP INDEX IF EXISTS jobs_live;
ALTER TABLE jobs RENAME TO jobs_v1;
{schema}
INSERT INTO jobs(record_id, user, request_id, job_id, phase, terminal, state, spec_bytes, created, updated,
                 finished, observed)
    SELECT record_id, user, request_id, job_id, phase, terminal,
           COALESCE(json_extract(observed, '$.state'), 'PENDING'), length(spec), created, updated,
           CASE WHEN terminal != 0 OR phase = 'failed' THEN updated END, observed
    FROM jobs_v1;
INSERT INTO specs(record_id, spec) SELECT record_id, spec FROM jobs_v1;
DROP TABLE jobs_v1;
"""

# Version 5 added the event log (events: AUTOINCREMENT, so a seq is never reused after a prune) and
# leases; both are new tables, which SCHEMA's CREATE ... IF NOT EXISTS adds to a version 4 database.
# Columns added to restarts since version 1: version 3 records the node count before and after each
# restart (elastic -N MIN-MAX jobs), version 4 how a failure was detected and its recovery's phases.
_RESTART_COLUMNS = {
    "nodes_before": "INTEGER NOT NULL DEFAULT 0",
    "nodes_after": "INTEGER NOT NULL DEFAULT 0",
    "detected_by": "TEXT NOT NULL DEFAULT ''",
    "phases": "TEXT NOT NULL DEFAULT '{}'",
}


def migrate(db: sqlite3.Connection) -> None:
    """Bring ``db`` to :data:`VERSION` in one transaction (a crash leaves the old version whole)."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version == VERSION:
        return
    columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    db.execute("BEGIN IMMEDIATE")
    try:
        if "spec" in columns:
            # restarts' REFERENCES follows the rename; legacy mode keeps it naming "jobs".
            db.execute("PRAGMA legacy_alter_table=ON")
            for statement in _FROM_V1.format(schema=SCHEMA).split(";\n"):
                if statement.strip():
                    db.execute(statement)
            db.execute("PRAGMA legacy_alter_table=OFF")
        else:
            for statement in SCHEMA.split(";\n"):
                if statement.strip():
                    db.execute(statement)
        have = {row[1] for row in db.execute("PRAGMA table_info(restarts)")}
        for column, kind in _RESTART_COLUMNS.items():
            if column not in have:  # an older table: CREATE ... IF NOT EXISTS kept its columns
                db.execute(f"ALTER TABLE restarts ADD COLUMN {column} {kind}")
        db.execute(f"PRAGMA user_version={VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
