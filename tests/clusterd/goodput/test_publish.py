"""The Prometheus goodput series: the leader's alone, bounded labels, the event loop kept free."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from clusterd.goodput.publish import OTHER, partition_label, publish_once, run
from clusterd.goodput.report import GoodputReporter
from clusterd.model.spec import JobSpec
from clusterd.observability.metrics import GOODPUT_RATIO, REGISTRY
from clusterd.store.records import JobRecord, Phase


class Store:
    def __init__(self, records: list[JobRecord]) -> None:
        self.records = records
        self.lists = 0

    async def list(self, **kwargs: Any) -> list[JobRecord]:
        self.lists += 1
        return self.records[: kwargs["limit"]]


def record(i: int, partition: str) -> JobRecord:
    return JobRecord(i, "alice", f"r{i}", JobSpec(), Phase.SUBMITTED, created=0.0, job_id=str(i), partition=partition)


def labels() -> set[str]:
    return {
        s.labels["partition"] for m in REGISTRY.collect() if m.name == "clusterd_job_goodput_ratio" for s in m.samples
    }


def test_a_partition_label_is_one_that_slurm_shows_or_other() -> None:
    assert partition_label("gpu", {"gpu", "cpu"}) == "gpu"
    assert partition_label("nope,cpu", {"gpu", "cpu"}) == "cpu"  # a pending job's list of partitions
    assert partition_label("x" * 500, {"gpu"}) == OTHER


async def test_a_round_yields_to_the_loop_and_labels_are_bounded() -> None:
    store = Store([record(i, "a,gpu" if i % 2 else f"made-up-{i}") for i in range(1, 1001)])
    ticks: list[int] = []

    async def ticker() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await publish_once(cast(Any, store), GoodputReporter(None, None), partitions=lambda: {"gpu"})
    task.cancel()
    assert len(ticks) >= 3  # other work ran while the round summed a thousand records
    assert labels() == {"gpu", OTHER}


async def test_a_follower_publishes_nothing() -> None:
    GOODPUT_RATIO.labels(partition="stale").set(0.5)
    store, stop = Store([record(1, "gpu")]), asyncio.Event()
    task = asyncio.create_task(
        run(cast(Any, store), GoodputReporter(None, None), stop, leading=lambda: False, partitions=lambda: {"gpu"})
    )
    await asyncio.sleep(0.05)
    stop.set()
    await task
    assert store.lists == 0 and labels() == set()
