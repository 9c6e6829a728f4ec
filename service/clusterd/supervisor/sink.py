"""Where the supervisor's job events go: the interface its parts publish into (the EventBus is one)."""

from __future__ import annotations

from typing import Protocol

from clusterd.supervisor.events import JobEvent


class EventSink(Protocol):
    """Takes job events without blocking (the EventBus fans them out to every WatchJobs stream)."""

    def publish(self, event: JobEvent) -> None: ...
