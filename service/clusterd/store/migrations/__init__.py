"""Data migrations of the job store: rewrites of stored rows that a schema change alone cannot do."""

from __future__ import annotations


class MigrationError(Exception):
    """A stored row an upgrade cannot carry over: the upgrade stops and the database is left as it was.

    The message is one line naming the row, for the operator (``clusterd`` exits 1 with it).
    """
