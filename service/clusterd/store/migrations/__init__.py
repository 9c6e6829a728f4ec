"""The store's Alembic revisions, applied in order by store/migrate.py when clusterd opens the store.

A released revision is never edited: a change is a new revision whose ``down_revision`` is the
newest one. Revisions write SQL against the tables as they stand at that revision (``op`` and raw
SQL), never through store/tables.py, which follows the newest revision. A data migration is a
revision like any other: it reads and rewrites rows through ``op.get_bind()`` in the same upgrade
transaction, e.g. re-encoding ``specs.spec`` in batches of record ids with a decoder of the old
bytes kept in the revision itself and store/codec.py's ``spec_bytes`` for the new ones. There are
no downgrades: each ``downgrade`` refuses.
"""
