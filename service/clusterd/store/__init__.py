"""Persistent records of submitted jobs (SQLite in WAL mode)."""
