"""The event log every replica tails: appended in commit order, read by position, pruned by age.

A seq is taken from the database (SQLite's AUTOINCREMENT, PostgreSQL's events_seq) inside the
append's transaction, after the dialect's event lock, so seqs increase in COMMIT order: a reader
that has seen seq N never later finds a newly committed seq below N. Seqs are never reused after a
prune.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import Connection, delete, func, insert, select

from clusterd.model.events import EventType
from clusterd.store import codec
from clusterd.store.database import Database
from clusterd.store.records import EventRow, LoggedEvent
from clusterd.store.tables import events


class EventLog:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def append(self, rows: Sequence[EventRow]) -> list[int]:
        """Append in one transaction; returns their seqs."""
        if not rows:
            return []

        def append(conn: Connection) -> list[int]:
            self._db.dialect.lock_events(conn)
            return [
                int(
                    conn.execute(
                        insert(events)
                        .values(
                            record_id=e.record.record_id,
                            type=e.type.value,
                            previous_state=e.previous_state,
                            message=e.message,
                            time=e.time,
                            record=json.loads(codec.event_record_json(e.record)),
                        )
                        .returning(events.c.seq)
                    ).scalar_one()
                )
                for e in rows
            ]

        return await self._db.write(append)

    async def after(self, seq: int, *, limit: int = 1000) -> list[LoggedEvent]:
        """Events with seq > ``seq``, ordered by seq, at most ``limit``."""
        stmt = select(events).where(events.c.seq > seq).order_by(events.c.seq).limit(limit)
        rows = await self._db.read(lambda conn: conn.execute(stmt).all())
        return [
            LoggedEvent(
                int(r.seq),
                codec.event_record_from(r.record),
                EventType(r.type),
                r.previous_state,
                r.message,
                float(r.time),
            )
            for r in rows
        ]

    async def bounds(self) -> tuple[int, int]:
        """(oldest seq kept, newest seq); (0, 0) when the log is empty."""
        stmt = select(func.coalesce(func.min(events.c.seq), 0), func.coalesce(func.max(events.c.seq), 0))
        lo, hi = await self._db.read(lambda conn: conn.execute(stmt).one())
        return int(lo), int(hi)

    async def prune(self, *, older_than: float) -> int:
        """Delete events whose time is before ``older_than``; returns how many went."""
        stmt = delete(events).where(events.c.time < older_than)
        return await self._db.write(lambda conn: conn.execute(stmt).rowcount)
