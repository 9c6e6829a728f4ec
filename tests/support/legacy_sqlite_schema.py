"""A frozen copy of the SQLite store's schema code from before Alembic (user_version 6), so tests can
build a database as that release left it without the migrations under test.

Specs live in their own table: a job row stays a few hundred bytes however large its spec, so
listing, counting and polling never read (or walk the overflow pages of) multi-MiB blobs. A Slurm
job id is not a key: Slurm reuses ids when slurmctld loses its state or FirstJobId is reset, so a
record is its ``record_id``, and of the records that hold one Slurm id exactly one is current
(``superseded=0``), which a partial UNIQUE index enforces.

What each user holds (live tasks and spec bytes, finished records and their bytes) is kept in
``usage`` by triggers on ``jobs``, so admitting a submission reads one row instead of summing every
record of the user (which cost ~0.5 ms per submit at 1,500 records, on the store's one thread).
"""

from __future__ import annotations

import sqlite3

VERSION = 6


def live(row: str = "") -> str:
    """SQL that is true for a live record (not terminal, not failed); ``row``: ``NEW.``, ``OLD.`` or ''."""
    return f"({row}terminal = 0 AND {row}phase != 'failed')"


def finished(row: str = "") -> str:
    """SQL that is true for a finished record: the complement of :func:`live`."""
    return f"({row}terminal != 0 OR {row}phase = 'failed')"


def _add(row: str) -> str:
    """The statement adding ``row``'s record to its user's usage."""
    up, done = live(row), finished(row)
    return (
        f"INSERT INTO usage(user, live_tasks, live_bytes, finished, finished_bytes) VALUES ({row}user, "
        f"{up} * {row}tasks, {up} * {row}spec_bytes, {done}, {done} * {row}spec_bytes) ON CONFLICT(user) DO "
        "UPDATE SET live_tasks = live_tasks + excluded.live_tasks, live_bytes = live_bytes + excluded.live_bytes, "
        "finished = finished + excluded.finished, finished_bytes = finished_bytes + excluded.finished_bytes;"
    )


def _take(row: str) -> str:
    """The statement taking ``row``'s record out of its user's usage."""
    up, done = live(row), finished(row)
    return (
        f"UPDATE usage SET live_tasks = live_tasks - {up} * {row}tasks, live_bytes = live_bytes - {up} * "
        f"{row}spec_bytes, finished = finished - {done}, finished_bytes = finished_bytes - {done} * "
        f"{row}spec_bytes WHERE user = {row}user;"
    )


_USAGE = f"""
CREATE TABLE IF NOT EXISTS usage (
    user            TEXT PRIMARY KEY,
    live_tasks      INTEGER NOT NULL,
    live_bytes      INTEGER NOT NULL,
    finished        INTEGER NOT NULL,
    finished_bytes  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS usage_insert AFTER INSERT ON jobs BEGIN {_add("NEW.")} END;
CREATE TRIGGER IF NOT EXISTS usage_delete AFTER DELETE ON jobs BEGIN {_take("OLD.")} END;
CREATE TRIGGER IF NOT EXISTS usage_update AFTER UPDATE OF user, phase, terminal, tasks, spec_bytes ON jobs
    WHEN {live("OLD.")} IS NOT {live("NEW.")} OR OLD.user IS NOT NEW.user OR OLD.tasks IS NOT NEW.tasks
         OR OLD.spec_bytes IS NOT NEW.spec_bytes
    BEGIN {_take("OLD.")} {_add("NEW.")} END;
"""

# Counted again from the records whenever the schema is migrated (the triggers keep it after).
_RECOUNT = f"""
DELETE FROM usage;
INSERT INTO usage(user, live_tasks, live_bytes, finished, finished_bytes)
    SELECT user, SUM({live()} * tasks), SUM({live()} * spec_bytes), SUM({finished()}),
           SUM({finished()} * spec_bytes)
    FROM jobs GROUP BY user;
"""

SCHEMA = (
    """
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
    + _USAGE
)

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
            _run(db, _FROM_V1.format(schema=SCHEMA))
            db.execute("PRAGMA legacy_alter_table=OFF")
        else:
            _run(db, SCHEMA)
        have = {row[1] for row in db.execute("PRAGMA table_info(restarts)")}
        for column, kind in _RESTART_COLUMNS.items():
            if column not in have:  # an older table: CREATE ... IF NOT EXISTS kept its columns
                db.execute(f"ALTER TABLE restarts ADD COLUMN {column} {kind}")
        _run(db, _RECOUNT)
        db.execute(f"PRAGMA user_version={VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _run(db: sqlite3.Connection, script: str) -> None:
    """Each statement of ``script`` in turn, inside the caller's transaction (``executescript`` would
    commit it first); statements end where SQLite says one is complete, so a trigger's body is whole."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            db.execute(statement)
            statement = ""
    if statement.strip():
        raise ValueError(f"an incomplete statement in the schema: {statement!r}")
