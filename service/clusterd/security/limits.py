"""Per-user limits: a request-rate token bucket and a cap on queued jobs.

Both raise :class:`~clusterd.errors.ResourceExhausted`, which the interceptor maps to
RESOURCE_EXHAUSTED: a client should back off and retry, not treat it as a bug. State is per
authenticated user, so the number of buckets is bounded by the identities in the tokens file and
the certificate map, not by anything a caller sends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterctl.v1 import jobs_pb2
from clusterd.auth.identity import Identity
from clusterd.errors import ResourceExhausted

if TYPE_CHECKING:
    from clusterd.store.sqlite import JobStore


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
            raise ResourceExhausted(f"rate limit: {self.rate:g} requests/s per user (burst {self.burst}); "
                                    f"retry in {wait:.2f}s")
        b.tokens -= 1.0


class JobQuota:
    """At most ``max_jobs`` non-terminal jobs per user (0 = off), counted from the store.

    Submissions still in flight are counted too, so N concurrent submits at the edge cannot all pass
    one count (the cap may refuse a submit early under a burst; it never lets one through late).
    A retry of a request_id the user already holds is let through: it submits nothing new, and
    refusing it would hide a job that exists.
    """

    def __init__(self, store: JobStore, max_jobs: int) -> None:
        self._store = store
        self.max_jobs = max_jobs
        self._inflight: dict[str, int] = {}

    async def acquire(self, ident: Identity, spec: jobs_pb2.JobSpec) -> None:
        if self.max_jobs <= 0:
            return
        user = ident.user
        self._inflight[user] = self._inflight.get(user, 0) + 1
        try:
            live, retry = await self._store.live_count(user, request_id=spec.request_id)
            if retry:
                return
            if live + self._inflight[user] - 1 >= self.max_jobs:
                raise ResourceExhausted(f"{user} already has {live} queued or running job(s); "
                                        f"the limit is {self.max_jobs} per user")
        except BaseException:
            self.release(ident)
            raise

    def release(self, ident: Identity) -> None:
        if self.max_jobs <= 0:
            return
        n = self._inflight.get(ident.user, 0) - 1
        if n > 0:
            self._inflight[ident.user] = n
        else:
            self._inflight.pop(ident.user, None)
