"""When the next checkpoint is due: ``CheckpointManager(interval=...)`` and ``ckpt.due()``.

``interval`` is wall-clock SECONDS of training between the start of one save and the next:

- ``None`` (the default): no schedule; ``due()`` is always True and the trainer's own condition
  (``step % 500 == 0``) decides, as before.
- a number: a fixed interval.
- ``"auto"``: the interval clusterd advises in its heartbeat replies (Young/Daly from this job's
  measured save stall and the failure rate of its nodes, bounded by clusterd's floor and ceiling);
  ``first`` seconds until the first advice arrives (clusterd advises once the run has saved), and
  always without heartbeats. Advice outside [MIN_AUTO, MAX_AUTO] is clamped here too: the reply is
  clusterd's word, but a bad value must not make a rank save every step or never.

The clock starts when the manager is created, and again at every restore() and every save() that
took a snapshot (a skipped or refused save leaves it running).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from .. import heartbeat

MIN_AUTO, MAX_AUTO = 1.0, 7 * 24 * 3600.0

Interval = float | str | None


def check_interval(interval: object) -> Interval:
    """The interval as given, or ValueError naming what is wrong."""
    if interval is None or interval == "auto":
        return interval
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise ValueError(f"interval must be None, 'auto' or seconds (a number), got {interval!r}")
    if not math.isfinite(interval) or interval <= 0:
        raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
    return float(interval)


class SaveSchedule:
    def __init__(self, interval: Interval, *, first: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = check_interval(interval)
        self._first = first
        self._clock = clock
        self._since = clock()
        self._last_poll: float | None = None
        self._pace = 0.0  # seconds between polls (an average), 0 until known

    def seconds(self) -> float | None:
        """The interval in force now (None: no schedule)."""
        if self.interval is None:
            return None
        if self.interval == "auto":
            advised = heartbeat.checkpoint_interval()
            if advised is None or not math.isfinite(advised):
                return self._first
            return min(MAX_AUTO, max(MIN_AUTO, advised))
        return float(self.interval)

    def poll(self) -> tuple[bool, int]:
        """(due by this rank's clock, polls left until it is by the pace of the polls so far: 0 when
        due or when the pace is not known yet). Called once per ``due()``."""
        now = self._clock()
        if self._last_poll is not None:
            gap = max(0.0, now - self._last_poll)
            self._pace = gap if self._pace <= 0 else 0.8 * self._pace + 0.2 * gap
        self._last_poll = now
        seconds = self.seconds()
        if seconds is None:
            return True, 0
        left = seconds - (now - self._since)
        if left <= 0:
            return True, 0
        return False, int(left / self._pace) if self._pace > 0 else 0

    def now(self) -> float:
        return self._clock()

    def restart(self, at: float | None = None) -> None:
        """A save began at ``at`` (or a restore returned now): the next is due one interval later."""
        self._since = self._clock() if at is None else at
