"""Worker-thread priority: checkpoint I/O should yield the CPU to the training it runs beside."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable


def lower_priority(increment: int) -> None:
    """Raise this thread's nice value by ``increment`` (Linux: threads have their own nice).

    Silently does nothing where per-thread priorities are not supported.
    """
    if increment <= 0 or not hasattr(os, "setpriority"):
        return
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + increment))


def nice_initializer(increment: int) -> Callable[[], None]:
    """A ThreadPoolExecutor initializer that lowers each worker's priority."""
    return lambda: lower_priority(increment)
