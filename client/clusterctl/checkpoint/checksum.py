"""Fast non-cryptographic checksums (xxh3_64) over fixed-size chunks of an object.

Chunking lets a multi-GiB shard be hashed by several threads (xxhash releases the GIL) and lets
a verifier report which byte range is bad. The digest of a chunk is 16 lowercase hex digits.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from concurrent.futures import Executor

import xxhash

ALGORITHM = "xxh3_64"
# Format 2 checksums 256 KiB chunks (format 1: the part size), so a rank that restores a slice of
# another rank's shard reads and verifies little more than the bytes it needs.
CHUNK_SIZE = 256 << 10


def digest(data: bytes | bytearray | memoryview) -> str:
    return xxhash.xxh3_64_hexdigest(data)


def chunk_starts(size: int, chunk_size: int, segments: Sequence[int] = (0,)) -> list[int]:
    """Start offsets of the chunks of an object of ``size`` bytes: every ``chunk_size`` bytes from the
    start of each segment (format 2 starts a segment at every large tensor, so a slice of a tensor that
    starts on a multiple of ``chunk_size`` inside it needs no bytes before it)."""
    bounds = [*segments, size]
    return [s for a, b in itertools.pairwise(bounds) for s in range(a, b, chunk_size)]


def chunk_digests(
    data: memoryview, chunk_size: int, executor: Executor | None = None, segments: Sequence[int] = (0,)
) -> list[str]:
    """xxh3_64 of each chunk of ``data`` (see :func:`chunk_starts`; an empty object has no chunks)."""
    data = data.cast("B")
    starts = chunk_starts(len(data), chunk_size, segments)
    ends = [*starts[1:], len(data)]
    if executor is None or len(starts) <= 1:
        return [digest(data[a:b]) for a, b in zip(starts, ends, strict=True)]
    return list(executor.map(lambda ab: digest(data[ab[0] : ab[1]]), zip(starts, ends, strict=True)))
