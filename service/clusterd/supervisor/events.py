"""Fan-out of job events to every WatchJobs stream.

Each subscriber owns a bounded queue. A subscriber that falls ``queue_size`` events behind is cut
off (its stream ends with RESOURCE_EXHAUSTED) rather than letting memory grow without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from clusterd.errors import ResourceExhausted
from clusterd.slurm.types import JobState
from clusterd.store.records import JobRecord


class EventType(enum.Enum):
    SNAPSHOT = "SNAPSHOT"
    SUBMITTED = "SUBMITTED"
    STATE_CHANGED = "STATE_CHANGED"
    RESTARTED = "RESTARTED"
    FINISHED = "FINISHED"
    CHECKPOINT = "CHECKPOINT"


@dataclass(frozen=True)
class JobEvent:
    type: EventType
    record: JobRecord
    previous_state: JobState | None = None
    message: str = ""
    time: float = field(default_factory=time.time)


_CLOSED = object()


class Subscription:
    def __init__(self, bus: EventBus, accept: Callable[[JobEvent], bool], size: int) -> None:
        self._bus = bus
        self._accept = accept
        self._queue: asyncio.Queue[object] = asyncio.Queue(maxsize=size)
        self.overflowed = False

    def offer(self, event: JobEvent) -> None:
        if not self._accept(event):
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True
            self._bus.unsubscribe(self)
            self._queue.get_nowait()  # make room for the close marker
            self._queue.put_nowait(_CLOSED)

    def close(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(_CLOSED)

    async def __aiter__(self) -> AsyncIterator[JobEvent]:
        try:
            while True:
                item = await self._queue.get()
                if item is _CLOSED:
                    if self.overflowed:
                        raise ResourceExhausted("watch stream fell too far behind; reconnect")
                    return
                assert isinstance(item, JobEvent)
                yield item
        finally:
            self._bus.unsubscribe(self)


class EventBus:
    def __init__(self, *, queue_size: int = 1000, max_subscribers: int = 1000) -> None:
        self._subs: set[Subscription] = set()
        self._queue_size = queue_size
        self._max = max_subscribers

    @property
    def subscriber_count(self) -> int:
        return len(self._subs)

    def subscribe(self, accept: Callable[[JobEvent], bool]) -> Subscription:
        if len(self._subs) >= self._max:
            raise ResourceExhausted(f"too many watchers (limit {self._max})")
        sub = Subscription(self, accept, self._queue_size)
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    def publish(self, event: JobEvent) -> None:
        event = replace(event, record=event.record.snapshot())
        for sub in list(self._subs):
            sub.offer(event)

    def close_all(self) -> None:
        for sub in list(self._subs):
            sub.close()
        self._subs.clear()
