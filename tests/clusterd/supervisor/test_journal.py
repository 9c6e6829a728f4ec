"""The event log between replicas: what one replica publishes, every replica's watchers get, in order."""

from __future__ import annotations

import asyncio
import time

import pytest

from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState
from clusterd.store.records import JobRecord, Phase
from clusterd.store.store import Store
from clusterd.supervisor.events import EventBus, JobEvent
from clusterd.supervisor.journal import EventJournal


def _record(record_id: int, user: str = "alice") -> JobRecord:
    return JobRecord(record_id, user, "", JobSpec(), Phase.SUBMITTED, time.time(), job_id=str(100 + record_id))


async def _take(sub: object, n: int) -> list[JobEvent]:
    out: list[JobEvent] = []

    async def read() -> None:
        async for ev in sub:  # type: ignore[attr-defined]
            out.append(ev)
            if len(out) == n:
                return

    await asyncio.wait_for(read(), 5)
    return out


async def test_every_replica_delivers_every_event_in_log_order(embedded_store: Store) -> None:
    buses = [EventBus(), EventBus()]
    journals = [EventJournal(embedded_store.events, bus, poll_seconds=0.02) for bus in buses]
    subs = [bus.subscribe(lambda ev: True) for bus in buses]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(j.run(stop)) for j in journals]
    await asyncio.sleep(0.05)
    for i in range(10):  # both replicas produce, interleaved
        rec = _record(i)
        rec.state = JobState.RUNNING
        journals[i % 2].publish(JobEvent(EventType.STATE_CHANGED, rec, previous_state=JobState.PENDING, message=str(i)))
    seen = [await _take(sub, 10) for sub in subs]
    stop.set()
    await asyncio.gather(*tasks)
    seqs = [[e.seq for e in s] for s in seen]
    assert seqs[0] == seqs[1] == sorted(set(seqs[0]))
    assert sorted(e.message for e in seen[0]) == sorted(str(i) for i in range(10))
    first = seen[0][0]
    assert first.record.state is JobState.RUNNING and first.previous_state is JobState.PENDING


async def test_replay_resumes_after_a_position(embedded_store: Store) -> None:
    bus = EventBus()
    journal = EventJournal(embedded_store.events, bus, poll_seconds=0.02)
    sub = bus.subscribe(lambda ev: True)
    stop = asyncio.Event()
    task = asyncio.create_task(journal.run(stop))
    await asyncio.sleep(0.05)
    for i in range(5):
        journal.publish(JobEvent(EventType.SUBMITTED, _record(i)))
    live = await _take(sub, 5)
    stop.set()
    await task
    replayed = [e async for e in journal.replay(live[1].seq)]
    assert [e.seq for e in replayed] == [e.seq for e in live[2:]]
    assert await journal.bounds() == (live[0].seq, live[-1].seq)


async def test_events_wait_in_order_while_the_store_fails(
    embedded_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = EventBus()
    journal = EventJournal(embedded_store.events, bus, poll_seconds=0.02)
    sub = bus.subscribe(lambda ev: True)
    real = embedded_store.events.append
    failures = [2]

    async def flaky(events):  # type: ignore[no-untyped-def]
        if failures[0]:
            failures[0] -= 1
            raise OSError("database unreachable")
        return await real(events)

    monkeypatch.setattr(embedded_store.events, "append", flaky)
    monkeypatch.setattr("clusterd.supervisor.journal._RETRY_SECONDS", 0.01)
    stop = asyncio.Event()
    task = asyncio.create_task(journal.run(stop))
    for i in range(3):
        journal.publish(JobEvent(EventType.SUBMITTED, _record(i), message=str(i)))
    got = await _take(sub, 3)
    stop.set()
    await task
    assert [e.message for e in got] == ["0", "1", "2"]


async def test_a_sole_writer_delivers_its_appends_without_reading_them_back(
    embedded_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded store's one journal hands each appended batch to its bus straight away, in log
    order and once each, even when its backstop read returns the same events again."""
    bus = EventBus()
    journal = EventJournal(embedded_store.events, bus, poll_seconds=0.01, sole_writer=True)
    sub = bus.subscribe(lambda ev: True)
    reads = [0]
    real = embedded_store.events.after

    async def counted(seq, *, limit=1000):  # type: ignore[no-untyped-def]
        reads[0] += 1
        return await real(0, limit=limit)  # every read returns the whole log: delivered ones again

    monkeypatch.setattr(embedded_store.events, "after", counted)
    stop = asyncio.Event()
    task = asyncio.create_task(journal.run(stop))
    await asyncio.sleep(0.03)
    for i in range(6):
        journal.publish(JobEvent(EventType.SUBMITTED, _record(i), message=str(i)))
        if i % 2:
            await asyncio.sleep(0.02)  # backstop reads in between
    got = await _take(sub, 6)
    await asyncio.sleep(0.05)
    stop.set()
    await task
    assert [e.message for e in got] == [str(i) for i in range(6)]
    assert [e.seq for e in got] == sorted({e.seq for e in got}) and got[0].seq > 0
    assert sub._queue.empty()  # nothing delivered twice
    assert reads[0] > 0 and journal.idle
    replayed = [e async for e in journal.replay(0)]
    assert replayed == got  # delivered exactly as a read of the log gives them (compact records)
