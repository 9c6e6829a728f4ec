"""Alembic's environment: run on the connection (and inside the transaction) store/migrate.py holds."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

connection: Connection = context.config.attributes["connection"]
context.configure(connection=connection)
with context.begin_transaction():
    context.run_migrations()
