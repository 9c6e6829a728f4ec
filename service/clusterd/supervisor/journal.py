"""The store's event log between the replicas: every job event is logged first, then delivered.

One delivery path for every replica and every event: a producer (the leader's reconciler and
restarter, any replica's submit or requeue handler) publishes into the journal, which appends the
events to the store's log in order; each replica tails the log and hands what it reads to its own
EventBus, which fans it out to that replica's WatchJobs and log followers. The log's sequence number
is the event's resume token, so a watcher that loses its replica resumes on another one from the
next event: no gap, no duplicate (the store keeps sequence order equal to commit order).

A local append wakes the local tail at once; other replicas' events are read every
``poll_seconds``. With ``sole_writer`` (the embedded store: no other process appends) the log's
order is this journal's append order, so what it appends goes to its bus straight from the append,
without a read back: one store round trip per batch of events instead of two. If the store is
unreachable, events wait in the outbox, in order, and are appended when it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace

from clusterd.slurm.types import JobState
from clusterd.store import codec
from clusterd.store.events import EventLog
from clusterd.store.records import EventRow, LoggedEvent
from clusterd.supervisor.events import EventBus, JobEvent

log = logging.getLogger(__name__)

_BATCH = 1000
_RETRY_SECONDS = 0.5
_PRUNE_EVERY_SECONDS = 60.0


def _row(event: JobEvent) -> EventRow:
    previous = event.previous_state.value if event.previous_state is not None else ""
    return EventRow(event.record, event.type, previous, event.message, event.time)


def _event(logged: LoggedEvent) -> JobEvent:
    previous = JobState(logged.previous_state) if logged.previous_state else None
    return JobEvent(logged.type, logged.record, previous, logged.message, logged.time, seq=logged.seq)


def _logged(row: EventRow, seq: int) -> JobEvent:
    """The event appended as ``row`` at ``seq``, exactly as a read of the log would give it."""
    record = codec.logged_record(row.record)
    return _event(LoggedEvent(seq, record, row.type, row.previous_state, row.message, row.time))


async def _either(first: asyncio.Event, second: asyncio.Event, *, timeout: float | None = None) -> None:
    """Until either event is set (or ``timeout`` seconds pass)."""
    waiters = [asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


class EventJournal:
    """An EventSink that logs into the store and feeds ``bus`` from the log (this replica's tail)."""

    def __init__(
        self,
        log: EventLog,
        bus: EventBus,
        *,
        poll_seconds: float = 0.1,
        retention_seconds: float = 3600.0,
        clock: Callable[[], float] = time.time,
        sole_writer: bool = False,
    ) -> None:
        self._log = log
        self._bus = bus
        self._sole_writer = sole_writer
        self._poll = poll_seconds
        self._retention = retention_seconds
        self._outbox: list[JobEvent] = []
        self._queued = asyncio.Event()
        self._appended = asyncio.Event()
        self._cursor = 0
        self._appended_up_to = 0  # the newest position this replica appended
        self._started = False
        self._clock = clock

    def publish(self, event: JobEvent) -> None:
        """Queue ``event`` for the log (never blocks: the caller holds a record lock)."""
        self._outbox.append(replace(event, record=event.record.snapshot()))
        self._queued.set()

    @property
    def idle(self) -> bool:
        """Whether every event this replica published has been logged and delivered to its bus.

        Delivery is asynchronous: a watch that starts right after a change may still be handed that
        change's event. Tests (and a shutdown) that need "everything so far is out" wait for this.
        """
        return not self._outbox and self._cursor >= self._appended_up_to

    async def start(self) -> None:
        """Begin the tail at the log's newest event: live watchers want what happens from now on."""
        self._cursor = (await self._log.bounds())[1]
        self._started = True

    async def run(self, stop: asyncio.Event) -> None:
        """Append and tail until ``stop``; then append what is still queued and deliver it."""
        if not self._started:
            await self.start()
        writer = asyncio.create_task(self._write(stop))
        try:
            await self._tail(stop)
        finally:
            await writer
            with contextlib.suppress(Exception):
                await self._read()

    async def _write(self, stop: asyncio.Event) -> None:
        while True:
            if not self._outbox:
                if stop.is_set():
                    return
                await _either(self._queued, stop)
                self._queued.clear()
                continue
            batch = self._outbox[:_BATCH]
            rows = [_row(e) for e in batch]
            try:
                seqs = await self._log.append(rows)
            except Exception:
                log.warning("event log append failed; %d event(s) wait in order", len(self._outbox), exc_info=True)
                if stop.is_set():
                    return  # shutting down with the store gone: what cannot be logged is lost here
                await asyncio.sleep(_RETRY_SECONDS)
                continue
            del self._outbox[: len(batch)]
            self._appended_up_to = max(self._appended_up_to, *seqs)
            if self._sole_writer:
                self._deliver(_logged(row, seq) for row, seq in zip(rows, seqs, strict=True))
            else:
                self._appended.set()

    async def _tail(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        pruned = loop.time()
        while not stop.is_set():
            self._appended.clear()  # before the read: an append during it wakes the next wait
            try:
                full = await self._read()
            except Exception:
                log.warning("event log read failed", exc_info=True)
                full = False
            if full:
                continue
            if loop.time() - pruned > _PRUNE_EVERY_SECONDS:
                pruned = loop.time()
                with contextlib.suppress(Exception):
                    await self._log.prune(older_than=self._clock() - self._retention)
            await _either(self._appended, stop, timeout=self._poll)

    async def _read(self) -> bool:
        """Deliver the log's events after the cursor; True when a whole batch came (read again)."""
        batch = await self._log.after(self._cursor, limit=_BATCH)
        self._deliver(_event(logged) for logged in batch)
        return len(batch) == _BATCH

    def _deliver(self, events: Iterable[JobEvent]) -> None:
        """Hand logged events to the bus in log order, each once (a read in flight while the writer
        delivered its own appends may return them again)."""
        for event in events:
            if event.seq > self._cursor:
                self._cursor = event.seq
                self._bus.publish(event)

    async def replay(self, after: int) -> AsyncIterator[JobEvent]:
        """The logged events after position ``after``, in order (a watcher resuming)."""
        while True:
            batch = await self._log.after(after, limit=_BATCH)
            for logged in batch:
                after = logged.seq
                yield _event(logged)
            if len(batch) < _BATCH:
                return

    async def bounds(self) -> tuple[int, int]:
        """(oldest kept, newest) positions in the log; (0, 0) when it is empty."""
        return await self._log.bounds()
