"""Worker threads for storage I/O: lower priority (checkpoint I/O yields the CPU to the training it
runs beside), and running the parts of one object in parallel without outliving an error."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, Executor, wait
from typing import Any, TypeVar

T = TypeVar("T")


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


def run_all(pool: Executor, fn: Callable[..., T], calls: Iterable[tuple[Any, ...]]) -> list[T]:
    """Run ``fn(*args)`` for every args tuple on ``pool``; return results in order.

    Waits for EVERY call to finish before raising the first error: a caller that closes a file
    descriptor or hands its buffer back after an error must not do so while sibling parts still
    read or write it. Calls not yet started are cancelled at the first failure.
    """
    futures = [pool.submit(fn, *args) for args in calls]
    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
    if any(f.exception() is not None for f in done if not f.cancelled()):
        for f in futures:
            f.cancel()
    wait(futures)
    for f in futures:
        if not f.cancelled() and f.exception() is not None:
            raise f.exception()  # type: ignore[misc]
    return [f.result() for f in futures]


MIN_READ_PART = 8 << 20


def read_part_size(size: int, part_size: int, concurrency: int) -> int:
    """Bytes per parallel ranged read of ``size`` bytes: at most ``part_size``, but split so that every
    worker has a part (a 64 MiB object is not one 64 MiB GET), and no smaller than 8 MiB."""
    return max(MIN_READ_PART, min(part_size, -(-size // max(1, concurrency))))
