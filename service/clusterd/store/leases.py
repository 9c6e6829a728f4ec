"""Named leases with fencing epochs (HA leadership), timed by the database's clock.

Acquisition is one upsert: the row lock ON CONFLICT takes makes concurrent acquirers take turns,
and its WHERE is checked on the row as the winner left it. The epoch is bumped on every new
acquisition (absent, expired, or another holder's) and kept when the holder still held it.
"""

from __future__ import annotations

from sqlalchemy import Connection, case, select, update

from clusterd.store.database import Database
from clusterd.store.records import Lease
from clusterd.store.tables import leases


class Leases:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def acquire(self, name: str, holder: str, ttl: float) -> Lease | None:
        """Take or keep the lease atomically; None while another holder's lease is live."""
        dialect = self._db.dialect

        def acquire(conn: Connection) -> Lease | None:
            now = dialect.now()
            stmt = dialect.insert(leases).values(name=name, holder=holder, epoch=1, expires=now + ttl)
            kept = (leases.c.holder == stmt.excluded.holder) & (leases.c.expires > now)
            stmt = stmt.on_conflict_do_update(
                index_elements=[leases.c.name],
                set_={
                    "holder": stmt.excluded.holder,
                    "epoch": case((kept, leases.c.epoch), else_=leases.c.epoch + 1),
                    "expires": stmt.excluded.expires,
                },
                where=(leases.c.expires <= now) | (leases.c.holder == stmt.excluded.holder),
            )
            row = conn.execute(
                stmt.returning(leases.c.name, leases.c.holder, leases.c.epoch, leases.c.expires - now)
            ).first()
            return Lease(row[0], row[1], int(row[2]), float(row[3])) if row is not None else None

        return await self._db.write(acquire)

    async def renew(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        """Extend it only while ``holder`` AND ``epoch`` match and it has not expired."""
        now = self._db.dialect.now()
        stmt = (
            update(leases)
            .where(leases.c.name == name, leases.c.holder == holder, leases.c.epoch == epoch, leases.c.expires > now)
            .values(expires=now + ttl)
        )
        return await self._db.write(lambda conn: conn.execute(stmt).rowcount == 1)

    async def current(self, name: str) -> Lease | None:
        now = self._db.dialect.now()
        stmt = select(leases.c.name, leases.c.holder, leases.c.epoch, leases.c.expires - now).where(
            leases.c.name == name
        )
        row = await self._db.read(lambda conn: conn.execute(stmt).first())
        return Lease(row[0], row[1], int(row[2]), float(row[3])) if row is not None else None

    async def release(self, name: str, holder: str, epoch: int) -> None:
        """Expire it now (clean shutdown), if still ``holder``'s at ``epoch``."""
        now = self._db.dialect.now()
        stmt = (
            update(leases)
            .where(leases.c.name == name, leases.c.holder == holder, leases.c.epoch == epoch, leases.c.expires > now)
            .values(expires=now)
        )
        await self._db.write(lambda conn: conn.execute(stmt))
