"""Who supervises: the replica holding the store's lease, for as long as it keeps renewing it.

Every replica serves the API; only the leader runs the restart supervisor. Leadership is a lease
row in the shared store with an expiry (the database's clock) and an epoch bumped on every new
acquisition. A replica trusts its leadership only until ``renew sent + lease_seconds`` on its OWN
monotonic clock, which is never later than the row's expiry: a leader frozen (SIGSTOP, a long GC,
a stalled disk) past that instant knows it may already be replaced the moment it runs again, before
it asks anyone. The fencing check (:meth:`Leadership.check`) then asks the store, so an action
decided just before a freeze is not carried out by a deposed leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable

from clusterd.config import ConfigError, HAConfig
from clusterd.errors import FailedPrecondition
from clusterd.observability.metrics import FAILOVERS, IS_LEADER, LEASE_EPOCH
from clusterd.store.leases import Leases

log = logging.getLogger(__name__)

LEASE_NAME = "supervisor"


class Deposed(FailedPrecondition):
    """This replica no longer holds the supervisor lease: what it was about to do is not done."""


def replica_name(config: HAConfig) -> str:
    return config.replica_name or f"{socket.gethostname()}:{os.getpid()}"


class Leadership:
    """Acquires, renews and gives up the supervisor lease; tells the supervisor whether it may act."""

    def __init__(
        self,
        leases: Leases,
        config: HAConfig,
        *,
        holder: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < config.renew_seconds < config.lease_seconds:
            raise ConfigError(
                f"ha.renew_seconds ({config.renew_seconds}) must be above 0 and below ha.lease_seconds "
                f"({config.lease_seconds}): a leader must renew before its lease runs out"
            )
        self._leases = leases
        self._config = config
        self.holder = holder or replica_name(config)
        self._clock = clock
        self._epoch = 0
        self._valid_until = 0.0
        self._listeners: list[Callable[[bool], None]] = []
        self._was_leader = False

    @property
    def epoch(self) -> int:
        """The epoch of the lease this replica holds or last held (0: never)."""
        return self._epoch

    @property
    def is_leader(self) -> bool:
        """Whether this replica may act now, by its own clock: no store round trip."""
        return self._epoch > 0 and self._clock() < self._valid_until

    def subscribe(self, listener: Callable[[bool], None]) -> None:
        """``listener(is_leader)`` on every change, from the lease loop."""
        self._listeners.append(listener)

    async def check(self) -> None:
        """Raise Deposed unless this replica holds the lease now, by the store's own word.

        The fencing check every supervisor action on Slurm passes right before it is made.
        """
        if not self.is_leader:
            raise Deposed(f"{self.holder} does not hold the supervisor lease (epoch {self._epoch} lapsed)")
        lease = await self._leases.current(LEASE_NAME)
        if lease is None or lease.holder != self.holder or lease.epoch != self._epoch or lease.expires_in <= 0:
            self._valid_until = 0.0
            self._changed()
            held = f"{lease.holder} at epoch {lease.epoch}" if lease is not None else "nobody"
            raise Deposed(f"{self.holder} lost the supervisor lease (epoch {self._epoch}); held by {held}")

    async def step(self) -> None:
        """One renewal (leader) or acquisition attempt (follower)."""
        ttl = self._config.lease_seconds
        sent = self._clock()
        try:
            if self.is_leader:
                if await self._leases.renew(LEASE_NAME, self.holder, self._epoch, ttl):
                    self._valid_until = sent + ttl
                else:
                    log.warning("lost the supervisor lease at epoch %d", self._epoch)
                    self._valid_until = 0.0
            if not self.is_leader:
                lease = await self._leases.acquire(LEASE_NAME, self.holder, ttl)
                if lease is not None:
                    if lease.epoch != self._epoch:
                        log.info("%s leads the supervisor at epoch %d", self.holder, lease.epoch)
                        if lease.epoch > 1:
                            FAILOVERS.inc()
                    self._epoch = lease.epoch
                    self._valid_until = sent + ttl
        except Exception:  # the store unreachable: leadership lapses on its own clock
            log.warning("supervisor lease: store error", exc_info=True)
        LEASE_EPOCH.set(self._epoch)
        self._changed()

    def _changed(self) -> None:
        now = self.is_leader
        IS_LEADER.set(1 if now else 0)
        if now != self._was_leader:
            self._was_leader = now
            for listener in self._listeners:
                listener(now)

    async def run(self, stop: asyncio.Event) -> None:
        """Renew or try to acquire every ``renew_seconds`` until ``stop``; then hand the lease back."""
        while not stop.is_set():
            await self.step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._config.renew_seconds)
        await self.release()

    async def release(self) -> None:
        """Expire the lease now (clean shutdown), so a follower takes over at its next try."""
        if self._epoch and self.is_leader:
            with contextlib.suppress(Exception):
                await self._leases.release(LEASE_NAME, self.holder, self._epoch)
        self._valid_until = 0.0
        self._changed()
