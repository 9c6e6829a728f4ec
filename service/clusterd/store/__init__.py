"""Persistent records of submitted jobs, the event log and leases (SQLite or PostgreSQL)."""
