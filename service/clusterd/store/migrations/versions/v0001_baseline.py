"""Baseline: the schema each store had before Alembic (SQLite user_version 6, PostgreSQL version 2).

An existing database of that shape is stamped here rather than created (store/migrate.py).
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision: str | None = None

_SQLITE = """
CREATE TABLE jobs (
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
CREATE TABLE specs (
    record_id   INTEGER PRIMARY KEY,
    spec        BLOB NOT NULL
);
CREATE UNIQUE INDEX jobs_request ON jobs(user, request_id) WHERE request_id != '';
CREATE UNIQUE INDEX jobs_current ON jobs(job_id) WHERE job_id IS NOT NULL AND superseded = 0;
CREATE INDEX jobs_job_id ON jobs(job_id, record_id);
CREATE INDEX jobs_live ON jobs(terminal, phase);
CREATE INDEX jobs_user ON jobs(user, terminal, record_id);
CREATE TABLE restarts (
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
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id   INTEGER NOT NULL,
    type        TEXT NOT NULL,
    previous_state TEXT NOT NULL,
    message     TEXT NOT NULL,
    time        REAL NOT NULL,
    record      TEXT NOT NULL
);
CREATE INDEX events_time ON events(time);
CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    epoch       INTEGER NOT NULL,
    expires     REAL NOT NULL
);
CREATE TABLE usage (
    user            TEXT PRIMARY KEY,
    live_tasks      INTEGER NOT NULL,
    live_bytes      INTEGER NOT NULL,
    finished        INTEGER NOT NULL,
    finished_bytes  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER usage_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO usage(user, live_tasks, live_bytes, finished, finished_bytes) VALUES (NEW.user,
        (NEW.terminal = 0 AND NEW.phase != 'failed') * NEW.tasks,
        (NEW.terminal = 0 AND NEW.phase != 'failed') * NEW.spec_bytes,
        (NEW.terminal != 0 OR NEW.phase = 'failed'),
        (NEW.terminal != 0 OR NEW.phase = 'failed') * NEW.spec_bytes)
    ON CONFLICT(user) DO UPDATE SET live_tasks = live_tasks + excluded.live_tasks,
        live_bytes = live_bytes + excluded.live_bytes, finished = finished + excluded.finished,
        finished_bytes = finished_bytes + excluded.finished_bytes;
END;
CREATE TRIGGER usage_delete AFTER DELETE ON jobs BEGIN
    UPDATE usage SET live_tasks = live_tasks - (OLD.terminal = 0 AND OLD.phase != 'failed') * OLD.tasks,
        live_bytes = live_bytes - (OLD.terminal = 0 AND OLD.phase != 'failed') * OLD.spec_bytes,
        finished = finished - (OLD.terminal != 0 OR OLD.phase = 'failed'),
        finished_bytes = finished_bytes - (OLD.terminal != 0 OR OLD.phase = 'failed') * OLD.spec_bytes
    WHERE user = OLD.user;
END;
CREATE TRIGGER usage_update AFTER UPDATE OF user, phase, terminal, tasks, spec_bytes ON jobs
    WHEN (OLD.terminal = 0 AND OLD.phase != 'failed') IS NOT (NEW.terminal = 0 AND NEW.phase != 'failed')
        OR OLD.user IS NOT NEW.user OR OLD.tasks IS NOT NEW.tasks OR OLD.spec_bytes IS NOT NEW.spec_bytes
BEGIN
    UPDATE usage SET live_tasks = live_tasks - (OLD.terminal = 0 AND OLD.phase != 'failed') * OLD.tasks,
        live_bytes = live_bytes - (OLD.terminal = 0 AND OLD.phase != 'failed') * OLD.spec_bytes,
        finished = finished - (OLD.terminal != 0 OR OLD.phase = 'failed'),
        finished_bytes = finished_bytes - (OLD.terminal != 0 OR OLD.phase = 'failed') * OLD.spec_bytes
    WHERE user = OLD.user;
    INSERT INTO usage(user, live_tasks, live_bytes, finished, finished_bytes) VALUES (NEW.user,
        (NEW.terminal = 0 AND NEW.phase != 'failed') * NEW.tasks,
        (NEW.terminal = 0 AND NEW.phase != 'failed') * NEW.spec_bytes,
        (NEW.terminal != 0 OR NEW.phase = 'failed'),
        (NEW.terminal != 0 OR NEW.phase = 'failed') * NEW.spec_bytes)
    ON CONFLICT(user) DO UPDATE SET live_tasks = live_tasks + excluded.live_tasks,
        live_bytes = live_bytes + excluded.live_bytes, finished = finished + excluded.finished,
        finished_bytes = finished_bytes + excluded.finished_bytes;
END;
"""

_POSTGRES = """
CREATE TABLE jobs (
    record_id   BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    "user"      TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    job_id      TEXT,
    phase       TEXT NOT NULL,
    terminal    BOOLEAN NOT NULL DEFAULT false,
    superseded  BOOLEAN NOT NULL DEFAULT false,
    state       TEXT NOT NULL DEFAULT 'PENDING',
    tasks       INTEGER NOT NULL DEFAULT 1,
    spec_bytes  BIGINT NOT NULL DEFAULT 0,
    created     DOUBLE PRECISION NOT NULL,
    updated     DOUBLE PRECISION NOT NULL,
    finished    DOUBLE PRECISION,
    observed    JSONB NOT NULL DEFAULT '{}'
);
CREATE TABLE specs (
    record_id   BIGINT PRIMARY KEY,
    spec        BYTEA NOT NULL
);
CREATE UNIQUE INDEX jobs_request ON jobs("user", request_id) WHERE request_id <> '';
CREATE UNIQUE INDEX jobs_current ON jobs(job_id) WHERE job_id IS NOT NULL AND NOT superseded;
CREATE INDEX jobs_job_id ON jobs(job_id, record_id);
CREATE INDEX jobs_live ON jobs(terminal, phase);
CREATE INDEX jobs_user ON jobs("user", terminal, record_id);
CREATE INDEX jobs_finished ON jobs(finished) WHERE finished IS NOT NULL;
CREATE TABLE restarts (
    record_id   BIGINT NOT NULL REFERENCES jobs(record_id),
    seq         INTEGER NOT NULL,
    cause       TEXT NOT NULL,
    nodes       TEXT NOT NULL,
    time        DOUBLE PRECISION NOT NULL,
    step        BIGINT NOT NULL,
    exit_code   INTEGER NOT NULL,
    detail      TEXT NOT NULL,
    nodes_before INTEGER NOT NULL DEFAULT 0,
    nodes_after INTEGER NOT NULL DEFAULT 0,
    detected_by TEXT NOT NULL DEFAULT '',
    phases      TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (record_id, seq)
);
CREATE SEQUENCE events_seq;
CREATE TABLE events (
    seq         BIGINT PRIMARY KEY,
    record_id   BIGINT NOT NULL,
    type        TEXT NOT NULL,
    previous_state TEXT NOT NULL,
    message     TEXT NOT NULL,
    time        DOUBLE PRECISION NOT NULL,
    record      JSONB NOT NULL
);
CREATE INDEX events_time ON events(time);
CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    epoch       BIGINT NOT NULL,
    expires     TIMESTAMPTZ NOT NULL
);
"""


def upgrade() -> None:
    script = _SQLITE if op.get_bind().dialect.name == "sqlite" else _POSTGRES
    for statement in _statements(script):
        op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("the store has no downgrades")


def _statements(script: str) -> list[str]:
    """``script`` cut at the semicolons that end a line outside a trigger's BEGIN ... END."""
    out, current, in_trigger = [], "", False
    for line in script.strip().splitlines():
        current += line + "\n"
        stripped = line.strip()
        if stripped.startswith("CREATE TRIGGER"):
            in_trigger = True
        if stripped.endswith(";") and (not in_trigger or stripped == "END;"):
            out.append(current.strip())
            current, in_trigger = "", False
    return out
