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

The clock starts when the manager is created, and again at every restore() and save().
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

    def due_here(self) -> bool:
        """Whether this rank's clock says a save is due."""
        seconds = self.seconds()
        return seconds is None or self._clock() - self._since >= seconds

    def restart(self) -> None:
        """A save began (or a restore returned): the next is due one interval from now."""
        self._since = self._clock()
