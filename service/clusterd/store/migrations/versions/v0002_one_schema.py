"""One schema on both databases: per-user usage is one indexed sum, lease times are epoch seconds.

SQLite loses the usage table and the triggers that kept it (the ``jobs_usage`` index answers the
sum instead) and gains PostgreSQL's ``jobs_finished`` index; PostgreSQL's lease expiry becomes
seconds since the epoch like SQLite's, and its own migration table goes.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision: str | None = "0001"


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("usage_insert", "usage_delete", "usage_update"):
            op.execute(f"DROP TRIGGER {trigger}")
        op.execute("DROP TABLE usage")
        op.execute("CREATE INDEX jobs_finished ON jobs(finished) WHERE finished IS NOT NULL")
        op.execute("CREATE INDEX jobs_usage ON jobs(user, terminal, phase, tasks, spec_bytes)")
    else:
        op.execute(
            "ALTER TABLE leases ALTER COLUMN expires TYPE DOUBLE PRECISION USING EXTRACT(EPOCH FROM expires)::float8"
        )
        op.execute("DROP TABLE IF EXISTS schema_migrations")
        op.execute('CREATE INDEX jobs_usage ON jobs("user", terminal, phase, tasks, spec_bytes)')


def downgrade() -> None:
    raise NotImplementedError("the store has no downgrades")
