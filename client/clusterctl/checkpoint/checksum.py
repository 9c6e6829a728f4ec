"""Fast non-cryptographic checksums (xxh3_64) over fixed-size chunks of an object.

Chunking lets a multi-GiB shard be hashed by several threads (xxhash releases the GIL) and lets
a verifier report which byte range is bad. The digest of a chunk is 16 lowercase hex digits.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor

import xxhash

ALGORITHM = "xxh3_64"
# Format 2 checksums 256 KiB chunks (format 1: the part size), so a rank that restores a slice of
# another rank's shard reads and verifies little more than the bytes it needs.
CHUNK_SIZE = 256 << 10


def digest(data: bytes | bytearray | memoryview) -> str:
    return xxhash.xxh3_64_hexdigest(data)


def chunk_digests(data: memoryview, chunk_size: int, executor: Executor | None = None) -> list[str]:
    """xxh3_64 of each ``chunk_size`` slice of ``data`` (an empty object has no chunks)."""
    data = data.cast("B")
    starts = range(0, len(data), chunk_size)
    if executor is None or len(starts) <= 1:
        return [digest(data[s:s + chunk_size]) for s in starts]
    return list(executor.map(lambda s: digest(data[s:s + chunk_size]), starts))


def first_mismatch(data: memoryview, chunk_size: int, expected: Sequence[str],
                   executor: Executor | None = None) -> int | None:
    """Index of the first chunk whose digest differs from ``expected`` (or None if all match)."""
    got = chunk_digests(data, chunk_size, executor)
    if len(got) != len(expected):
        return min(len(got), len(expected))
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        if a != b:
            return i
    return None
