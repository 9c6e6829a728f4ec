"""An index on restarts' decision time: a starting or newly leading service reads the recent ones
(node health, failure history) without scanning every restart kept."""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision: str | None = "0003"


def upgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS restarts_time ON restarts(time)")


def downgrade() -> None:
    raise NotImplementedError("the store has no downgrades")
