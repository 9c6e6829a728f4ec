"""Fan-out of job events to every WatchJobs stream.

Each subscriber owns a bounded queue. A subscriber that falls ``queue_size`` events behind is cut
off (its stream ends with RESOURCE_EXHAUSTED) rather than letting memory grow without bound.
Admission is capped twice: ``max_subscribers`` in all, and ``max_per_user`` for any one user, so
one tenant opening streams in a loop cannot take the slots everyone else needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from clusterd.errors import ResourceExhausted
from clusterd.model.events import EventType
from clusterd.slurm.types import JobState
from clusterd.store.records import JobRecord


@dataclass(frozen=True)
class JobEvent:
    type: EventType
    record: JobRecord
    previous_state: JobState | None = None
    message: str = ""
    time: float = field(default_factory=time.time)
    seq: int = 0  # position in the store's event log (0: not logged yet, or a SNAPSHOT): the resume token


_CLOSED = object()


class Subscription:
    def __init__(self, bus: EventBus, accept: Callable[[JobEvent], bool], size: int, user: str) -> None:
        self._bus = bus
        self.user = user
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
    def __init__(self, *, queue_size: int = 1000, max_subscribers: int = 1000, max_per_user: int = 0) -> None:
        """``max_per_user`` 0 = only the global cap applies."""
        self._subs: set[Subscription] = set()
        self._per_user: Counter[str] = Counter()
        self._queue_size = queue_size
        self._max = max_subscribers
        self._max_per_user = max_per_user

    @property
    def subscriber_count(self) -> int:
        return len(self._subs)

    def watchers_of(self, user: str) -> int:
        return self._per_user[user]

    def subscribe(self, accept: Callable[[JobEvent], bool], *, user: str = "") -> Subscription:
        """A stream of the events ``accept`` takes, counted against ``user``'s watcher slots.

        Raises ResourceExhausted naming the limit that refused it; the per-user cap is checked
        first, so a user at their own cap learns that rather than a misleading global figure.
        """
        if self._max_per_user > 0 and self._per_user[user] >= self._max_per_user:
            raise ResourceExhausted(
                f"{user or 'this caller'} already has {self._per_user[user]} watch stream(s) open; "
                f"the limit is {self._max_per_user} per user (limits.max_watchers_per_user)"
            )
        if len(self._subs) >= self._max:
            raise ResourceExhausted(f"too many watchers (limit {self._max} in all, limits.max_watchers)")
        sub = Subscription(self, accept, self._queue_size, user)
        self._subs.add(sub)
        self._per_user[user] += 1
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if sub in self._subs:
            self._subs.discard(sub)
            self._per_user[sub.user] -= 1
            if self._per_user[sub.user] <= 0:
                del self._per_user[sub.user]

    def publish(self, event: JobEvent) -> None:
        event = replace(event, record=event.record.snapshot())
        for sub in list(self._subs):
            sub.offer(event)

    def close_all(self) -> None:
        for sub in list(self._subs):
            sub.close()
        self._subs.clear()
        self._per_user.clear()
