"""Keeps the Prometheus goodput series current: every few seconds, the live jobs per partition."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from clusterd.goodput.fleet import summarize
from clusterd.goodput.report import GoodputReporter
from clusterd.observability.metrics import GOODPUT_RATIO, GOODPUT_SECONDS
from clusterd.store.jobs import JobRecords

log = logging.getLogger(__name__)

_MAX_JOBS = 100_000  # live records summed per round: a bound on one round's cost


async def publish_once(store: JobRecords, reporter: GoodputReporter) -> None:
    records = await store.list(user=None, include_finished=False, limit=_MAX_JOBS)
    rows = summarize(((r.partition, r.user, reporter.report(r).goodput) for r in records if not r.array), by_user=False)
    GOODPUT_RATIO.clear()  # a partition with no live job left drops out
    GOODPUT_SECONDS.clear()
    for row in rows:
        GOODPUT_RATIO.labels(partition=row.partition).set(row.ettr)
        for part, seconds in row.breakdown.items():
            GOODPUT_SECONDS.labels(partition=row.partition, part=part).set(seconds)


async def run(store: JobRecords, reporter: GoodputReporter, stop: asyncio.Event, *, every: float = 15.0) -> None:
    """Publish every ``every`` seconds until ``stop`` is set; a failed round is logged and skipped."""
    while not stop.is_set():
        try:
            await publish_once(store, reporter)
        except Exception as exc:  # the store is away: the series keep their last values
            log.warning("goodput metrics not refreshed: %s", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
