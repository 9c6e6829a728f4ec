"""Specs as the store's versioned JSON (store/codec.py) instead of serialized JobSpec messages.

Every stored spec is re-encoded in the upgrade's transaction by store/migrations/legacy_spec.py,
the only reader of the old form; a spec it cannot read stops the upgrade naming its record.
"""

from __future__ import annotations

from alembic import op

from clusterd.store.migrations import legacy_spec

revision = "0003"
down_revision: str | None = "0002"


def upgrade() -> None:
    legacy_spec.reencode_all(op.get_bind())


def downgrade() -> None:
    raise NotImplementedError("the store has no downgrades")
