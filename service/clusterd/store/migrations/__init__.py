"""The store's Alembic revisions, applied in order by store/migrate.py when clusterd opens the store.

A released revision is never edited: a change is a new revision whose ``down_revision`` is the
newest one. Revisions write SQL against the tables as they stand at that revision (``op`` and raw
SQL), never through store/tables.py, which follows the newest revision. A data migration is a
revision like any other: it reads and rewrites rows through ``op.get_bind()`` in the same upgrade
transaction (v0003 re-encodes every stored spec with legacy_spec.py, the only reader of the
serialized JobSpec messages earlier releases stored). There are no downgrades: each ``downgrade``
refuses.
"""

from __future__ import annotations


class MigrationError(Exception):
    """A stored row an upgrade cannot carry over: the upgrade stops and the database is left as it was.

    The message is one line naming the row, for the operator (``clusterd`` exits 1 with it).
    """
