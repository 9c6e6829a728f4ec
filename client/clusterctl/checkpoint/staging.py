"""Bounded host memory for snapshots.

A save copies the state into a staging buffer from this pool and returns; the buffer is
released when its upload is done. The pool holds at most ``slots`` buffers in use and at most
``capacity`` bytes allocated; ``acquire`` waits for a release rather than growing past either
bound. Buffers are reused across saves, so steady-state snapshots copy into memory that is
already mapped (no page faults), which is what makes the snapshot as fast as a plain memcpy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from .errors import StagingLimitError

Allocator = Callable[[int], np.ndarray]


def _alloc(nbytes: int) -> np.ndarray:
    return np.empty(nbytes, dtype=np.uint8)


class StagingBuffer:
    """A uint8 array of exactly the requested size, backed by a pooled buffer."""

    def __init__(self, pool: StagingPool, backing: np.ndarray, nbytes: int, pinned: bool) -> None:
        self._pool = pool
        self.backing = backing
        self.pinned = pinned
        self.array = backing[:nbytes]
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._pool._release(self.backing, self.pinned)


class StagingPool:
    """At most ``slots`` buffers in use and ``capacity`` bytes allocated (None = unbounded bytes)."""

    def __init__(
        self,
        capacity: int | None,
        slots: int = 1,
        *,
        allocator: Allocator = _alloc,
        pinned_allocator: Allocator | None = None,
    ) -> None:
        self.capacity = capacity
        self.slots = max(1, slots)
        self._alloc = allocator
        self._pinned_alloc = pinned_allocator
        self._free: list[tuple[np.ndarray, bool]] = []
        self._in_use = 0
        self._allocated = 0
        self._cond = threading.Condition()

    @property
    def allocated_bytes(self) -> int:
        return self._allocated

    def acquire(self, nbytes: int, *, pinned: bool = False, timeout: float | None = None) -> StagingBuffer:
        """A buffer of ``nbytes``; waits while the pool is at its bounds.

        Raises:
            StagingLimitError: ``nbytes`` exceeds the capacity, or ``timeout`` expired.
        """
        if self.capacity is not None and nbytes > self.capacity:
            raise StagingLimitError(
                f"snapshot needs {nbytes} bytes of staging memory, more than the configured "
                f"staging_bytes={self.capacity}; raise CheckpointConfig.staging_bytes"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._in_use < self.slots:
                    buf = self._take(nbytes, pinned)
                    if buf is not None:
                        self._in_use += 1
                        return StagingBuffer(self, buf, nbytes, pinned)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise StagingLimitError(f"no staging memory for {nbytes} bytes within {timeout}s")
                self._cond.wait(remaining)

    def _take(self, nbytes: int, pinned: bool) -> np.ndarray | None:
        fits = [i for i, (b, p) in enumerate(self._free) if b.nbytes >= nbytes and p == pinned]
        if fits:
            i = min(fits, key=lambda j: self._free[j][0].nbytes)
            return self._free.pop(i)[0]
        # Drop free buffers that are too small (or of the wrong kind) until the new one fits.
        while (self.capacity is None or self._allocated + nbytes > self.capacity) and self._free:
            old, _ = self._free.pop(0)
            self._allocated -= old.nbytes
        if self.capacity is not None and self._allocated + nbytes > self.capacity:
            return None
        alloc = self._pinned_alloc if pinned and self._pinned_alloc is not None else self._alloc
        buf = alloc(nbytes)
        self._allocated += buf.nbytes
        return buf

    def _release(self, backing: np.ndarray, pinned: bool) -> None:
        with self._cond:
            self._in_use -= 1
            self._free.append((backing, pinned))
            # keep no more free buffers than slots
            while len(self._free) > self.slots:
                old, _ = self._free.pop(0)
                self._allocated -= old.nbytes
            self._cond.notify_all()

    def clear(self) -> None:
        """Free all idle buffers (memory goes back to the OS)."""
        with self._cond:
            for old, _ in self._free:
                self._allocated -= old.nbytes
            self._free.clear()
