"""The event log: seqs in commit order under concurrent appenders, reads after a seq, bounds, pruning."""

from __future__ import annotations

import asyncio

from clusterd.model.causes import Cause
from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState
from clusterd.store.records import EventRow, JobRecord, Phase, RestartEntry
from clusterd.store.store import Store


async def _record(store: Store, request_id: str = "") -> JobRecord:
    rec, _ = await store.jobs.reserve("alice", request_id, JobSpec(command=["hostname"], script="#!/bin/sh\n"))
    rec.phase, rec.job_id, rec.name, rec.nodes = Phase.SUBMITTED, "7", "train", ("n1", "n2")
    return rec


async def test_events_read_back_as_compact_records_in_seq_order(store: Store) -> None:
    assert await store.events.bounds() == (0, 0)
    rec = await _record(store)
    first = await store.events.append([EventRow(rec.snapshot(), EventType.SUBMITTED, "", "submitted", 10.0)])
    rec.state = JobState.RUNNING
    rec.restarts.append(RestartEntry(Cause.NODE_FAILURE, ("n2",), 11.0, 3, phases={"failed": 11.0}))
    more = await store.events.append(
        [
            EventRow(rec.snapshot(), EventType.STATE_CHANGED, "PENDING", "running", 12.0),
            EventRow(rec.snapshot(), EventType.RESTARTED, "RUNNING", "requeued", 13.0),
        ]
    )
    assert len(first) == 1 and len(more) == 2 and first[0] < more[0] < more[1]
    assert await store.events.append([]) == []
    events = await store.events.after(0)
    assert [e.seq for e in events] == first + more
    assert [e.type for e in events] == ["SUBMITTED", "STATE_CHANGED", "RESTARTED"]
    got = events[1]
    assert got.previous_state == "PENDING" and got.message == "running" and got.time == 12.0
    assert got.record.record_id == rec.record_id and got.record.state is JobState.RUNNING
    assert got.record.nodes == ("n1", "n2") and got.record.name == "train" and got.record.job_id == "7"
    assert got.record.restarts == rec.restarts and got.record.spec == JobSpec()  # compact: no spec
    assert events[0].record.state is JobState.PENDING and events[0].record.restarts == []
    assert [e.seq for e in await store.events.after(first[0])] == more
    assert [e.seq for e in await store.events.after(0, limit=2)] == [first[0], more[0]]
    assert await store.events.after(more[1]) == []
    assert await store.events.bounds() == (first[0], more[1])


async def test_pruning_drops_old_events_and_never_reuses_a_seq(store: Store) -> None:
    rec = await _record(store)
    seqs = await store.events.append([EventRow(rec, EventType.SUBMITTED, "", "", float(t)) for t in range(5)])
    assert await store.events.prune(older_than=3.0) == 3
    assert await store.events.bounds() == (seqs[3], seqs[4])
    assert await store.events.prune(older_than=100.0) == 2
    assert await store.events.bounds() == (0, 0)
    (again,) = await store.events.append([EventRow(rec, EventType.FINISHED, "RUNNING", "", 200.0)])
    assert again > seqs[-1]  # a watcher's resume token from before the prune still means "after this"


async def test_concurrent_appenders_commit_in_seq_order(replicas: tuple[Store, Store]) -> None:
    """Two replicas append at once while a reader tails: it never finds a seq below one it has read."""
    a, b = replicas
    rec = await _record(a)
    done = asyncio.Event()
    seen: list[int] = []

    async def append(store: Store, tag: str) -> list[int]:
        out: list[int] = []
        for i in range(40):
            out += await store.events.append(
                [EventRow(rec, EventType.CHECKPOINT, "", f"{tag}{i}-{k}", 1.0) for k in range(2)]
            )
        return out

    async def tail() -> None:
        last = 0
        while True:
            finished = done.is_set()
            for event in await b.events.after(last, limit=7):
                assert event.seq > last
                last = event.seq
                seen.append(event.seq)
            if finished and not await b.events.after(last):
                return

    reader = asyncio.create_task(tail())
    written = await asyncio.gather(append(a, "a"), append(b, "b"), append(a, "c"))
    done.set()
    await reader
    everything = sorted(s for batch in written for s in batch)
    assert seen == everything  # none skipped: every committed seq was above the reader's position
    # Every seq a later look finds was already there when the reader passed it.
    assert [e.seq for e in await a.events.after(0, limit=10_000)] == everything
