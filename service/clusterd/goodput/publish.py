"""Keeps the Prometheus goodput series current: every few seconds, the live jobs per partition.

Only the leader publishes (a follower's records lag, and two replicas would show two answers); a
follower shows none. A round reads at most _MAX_JOBS records and yields to the event loop between
chunks of them, so heartbeats and API calls are not held up by it; it needs no advice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection

from clusterd.goodput.accounting import Goodput
from clusterd.goodput.fleet import summarize
from clusterd.goodput.report import GoodputReporter
from clusterd.observability.metrics import GOODPUT_RATIO, GOODPUT_SECONDS
from clusterd.store.jobs import JobRecords

log = logging.getLogger(__name__)

_MAX_JOBS = 10_000  # live records summed per round: a bound on one round's cost
_CHUNK = 200  # records worked out between two yields to the event loop
OTHER = "other"  # the label of a partition Slurm does not show


def partition_label(partition: str, known: Collection[str]) -> str:
    """A bounded label: the first of a pending job's partitions ("a,b") that Slurm shows, else
    "other" (what a submitter wrote never becomes a series of its own)."""
    for name in partition.split(","):
        if name.strip() in known:
            return name.strip()
    return OTHER


def _clear() -> None:
    GOODPUT_RATIO.clear()
    GOODPUT_SECONDS.clear()


async def publish_once(
    store: JobRecords, reporter: GoodputReporter, *, partitions: Callable[[], Collection[str]] = frozenset
) -> None:
    """One round: ``partitions`` are the partitions Slurm shows now (the labels allowed)."""
    records = await store.list(user=None, include_finished=False, limit=_MAX_JOBS)
    known = partitions()
    jobs: list[tuple[str, str, Goodput]] = []
    for i, rec in enumerate(records):
        if i and i % _CHUNK == 0:
            await asyncio.sleep(0)
        if not rec.array:
            jobs.append((partition_label(rec.partition, known), rec.user, reporter.goodput(rec)))
    rows = summarize(jobs, by_user=False)
    _clear()  # a partition with no live job left drops out
    for row in rows:
        GOODPUT_RATIO.labels(partition=row.partition).set(row.ettr)
        for part, seconds in row.breakdown.items():
            GOODPUT_SECONDS.labels(partition=row.partition, part=part).set(seconds)


async def run(
    store: JobRecords,
    reporter: GoodputReporter,
    stop: asyncio.Event,
    *,
    leading: Callable[[], bool],
    partitions: Callable[[], Collection[str]],
    every: float = 15.0,
) -> None:
    """Publish every ``every`` seconds while leading, until ``stop`` is set; a failed round is
    logged and skipped."""
    while not stop.is_set():
        if not leading():
            _clear()
        else:
            try:
                await publish_once(store, reporter, partitions=partitions)
            except Exception as exc:  # the store is away: the series keep their last values
                log.warning("goodput metrics not refreshed: %s", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
