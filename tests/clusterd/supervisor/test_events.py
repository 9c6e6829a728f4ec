"""The event bus on its own: fan-out, slow watchers cut off, global and per-user watcher caps."""

from __future__ import annotations

import pytest

from clusterd.errors import ResourceExhausted
from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec
from clusterd.store.records import JobRecord, Phase
from clusterd.supervisor.events import EventBus, JobEvent


def event(user: str = "alice", job_id: str = "1") -> JobEvent:
    rec = JobRecord(
        record_id=1,
        user=user,
        request_id="",
        spec=JobSpec(),
        phase=Phase.SUBMITTED,
        created=0.0,
        job_id=job_id,
    )
    return JobEvent(EventType.SUBMITTED, rec)


def test_one_user_cannot_take_every_slot() -> None:
    bus = EventBus(max_subscribers=3, max_per_user=2)
    a1 = bus.subscribe(lambda ev: True, user="alice")
    bus.subscribe(lambda ev: True, user="alice")
    with pytest.raises(
        ResourceExhausted,
        match=r"alice already has 2 watch stream\(s\) open; the limit is 2 per "
        r"user \(limits.max_watchers_per_user\)",
    ):
        bus.subscribe(lambda ev: True, user="alice")
    bus.subscribe(lambda ev: True, user="bob")  # bob still gets in
    with pytest.raises(ResourceExhausted, match=r"limit 3 in all"):
        bus.subscribe(lambda ev: True, user="carol")
    bus.unsubscribe(a1)
    bus.unsubscribe(a1)  # twice is harmless: the count is not freed twice
    assert bus.watchers_of("alice") == 1 and bus.subscriber_count == 2
    bus.subscribe(lambda ev: True, user="alice")
    bus.close_all()
    assert bus.subscriber_count == 0 and bus.watchers_of("alice") == 0


async def test_events_reach_accepting_watchers_and_a_slow_one_is_cut_off() -> None:
    bus = EventBus(queue_size=2)
    mine = bus.subscribe(lambda ev: ev.record.user == "alice", user="alice")
    slow = bus.subscribe(lambda ev: True, user="bob")
    bus.publish(event("alice"))
    bus.publish(event("bob"))
    bus.publish(event("bob"))  # bob's queue (size 2) is full: his stream ends
    assert slow.overflowed and bus.watchers_of("bob") == 0
    bus.close_all()
    assert [e.record.user async for e in mine] == ["alice"]
    with pytest.raises(ResourceExhausted, match="fell too far behind"):
        async for _ in slow:
            pass


async def test_a_published_record_is_a_snapshot() -> None:
    bus = EventBus()
    sub = bus.subscribe(lambda ev: True, user="alice")
    ev = event()
    bus.publish(ev)
    ev.record.restarts.append(None)  # type: ignore[arg-type]
    bus.close_all()
    assert [e.record.restarts async for e in sub] == [[]]
