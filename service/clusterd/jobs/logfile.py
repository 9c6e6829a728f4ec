"""Blocking reads of an open output file: where its last N lines start, the bytes past an offset.

Each call is small and bounded (one block, or a bounded backwards scan) and runs in a worker
thread (clusterd.jobs.logs calls these through ``asyncio.to_thread``): output files live on
network filesystems whose reads can stall, and the event loop must not stall with them.
"""

from __future__ import annotations

import os

_BLOCK = 64 << 10
_MAX_SCAN = 64 << 20  # `--tail N` looks back at most this far for N line ends (huge lines: starts there)


def tail_offset(fd: int, size: int, lines: int) -> int:
    """Offset of the first byte of the last ``lines`` lines of the first ``size`` bytes (0: all).

    A final newline ends the last line rather than starting an empty one, as ``tail -n`` counts.
    """
    if lines <= 0 or size <= 0:
        return 0
    end = size - 1 if os.pread(fd, 1, size - 1) == b"\n" else size  # the last line's own newline
    found = 0
    pos = end
    while pos > 0 and size - pos < _MAX_SCAN:
        start = max(0, pos - _BLOCK)
        data = os.pread(fd, pos - start, start)
        at = len(data)
        while True:
            at = data.rfind(b"\n", 0, at)
            if at < 0:
                break
            found += 1
            if found == lines:
                return start + at + 1
        pos = start
    return pos


def read_at(fd: int, offset: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``offset`` (b"" at the end)."""
    return os.pread(fd, limit, offset)


def identity(fd: int) -> tuple[int, int, int]:
    """(device, inode, size) of the open file: the same file grows; a new one has another inode."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, st.st_size
