"""Per-user limits: the request-rate token bucket (at the edge) and the job quotas (in the domain).

Both raise :class:`~clusterd.errors.ResourceExhausted`, which maps to RESOURCE_EXHAUSTED: a client
should back off and retry, not treat it as a bug. State is per authenticated user, so the number of
buckets is bounded by the identities in the tokens file and the certificate map, not by anything a
caller sends. Quotas are enforced inside the store's reservation transaction (store/bounds.py), so
concurrent submissions of one user cannot all pass one count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from clusterd.config import LimitsConfig
from clusterd.errors import ResourceExhausted
from clusterd.model.spec import JobSpec
from clusterd.store.bounds import UserBounds
from clusterd.store.jobs import JobRecords
from clusterd.store.records import JobRecord

log = logging.getLogger(__name__)


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """Token bucket per user: ``burst`` calls at once, refilled at ``rate`` per second (0 = off)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def check(self, user: str) -> None:
        if self.rate <= 0:
            return
        now = self._clock()
        b = self._buckets.get(user)
        if b is None:
            b = self._buckets[user] = _Bucket(float(self.burst), now)
        b.tokens = min(float(self.burst), b.tokens + (now - b.stamp) * self.rate)
        b.stamp = now
        if b.tokens < 1.0:
            wait = (1.0 - b.tokens) / self.rate
            raise ResourceExhausted(
                f"rate limit: {self.rate:g} requests/s per user (burst {self.burst}); retry in {wait:.2f}s"
            )
        b.tokens -= 1.0


class Quotas:
    """What each user may hold in the store: live tasks, spec bytes, retained finished records.

    A retry of a request_id the user already holds is let through: it submits nothing new, and
    refusing it would hide a job that exists.
    """

    def __init__(self, store: JobRecords, limits: LimitsConfig, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self.bounds = UserBounds(
            max_live_tasks=limits.max_jobs_per_user,
            max_spec_bytes=limits.max_spec_bytes_per_user,
            max_finished=limits.max_finished_per_user,
        )
        self._retention = limits.finished_retention_seconds
        self._prune_every = limits.prune_interval_seconds

    async def reserve_submit(self, user: str, spec: JobSpec, *, tasks: int) -> tuple[JobRecord, bool]:
        """Admit and reserve one submission of ``tasks`` tasks (an array's task count, else 1).

        Returns the store's (record, created); raises ResourceExhausted naming the limit.
        """
        return await self._store.reserve(user, spec.request_id, spec, tasks=max(1, tasks), limits=self.bounds)

    async def prune(self) -> int:
        """Drop finished records past the retention age or each user's count; returns how many."""
        cutoff = self._clock() - self._retention if self._retention > 0 else float("-inf")
        return await self._store.prune_finished(older_than=cutoff, keep_per_user=self.bounds.max_finished)

    async def run_retention(self, stop: asyncio.Event) -> None:
        """Prune now and every ``prune_interval_seconds`` until ``stop`` is set."""
        while not stop.is_set():
            try:
                pruned = await self.prune()
                if pruned:
                    log.info("retention pruned %d finished record(s)", pruned)
            except Exception:
                log.exception("retention prune failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._prune_every)
