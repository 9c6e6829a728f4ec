"""Verified ranged reads of shards: read only the byte ranges a restore needs, check every chunk read.

A restore first says which byte ranges of which rank's shard it needs (:meth:`RangeReader.want`),
then :meth:`RangeReader.fetch` widens each range to the shard's checksum chunks, merges touching
ranges, reads each merged range with one parallel ranged read (S3 ranged GETs, POSIX ``preadv``),
and checks every chunk against the manifest before anything is decoded. :meth:`RangeReader.view`
then hands out views into those buffers (no copy).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from concurrent.futures import Executor

import numpy as np

from ..storage import ObjectNotFoundError, Storage
from . import checksum
from .errors import CorruptCheckpointError
from .manifest import ShardManifest


class RangeReader:
    """Verified reads of byte ranges of the shards of one step, by saved rank."""

    def __init__(self, storage: Storage, manifest: Callable[[int], ShardManifest], executor: Executor | None) -> None:
        self._storage = storage
        self._manifest = manifest
        self._executor = executor
        self._wanted: dict[int, list[tuple[int, int]]] = {}
        self._direct: list[tuple[int, int, int, np.ndarray]] = []
        self._buffers: dict[int, list[tuple[int, np.ndarray]]] = {}  # rank -> sorted (start, bytes)
        self.bytes_read = 0

    def want(self, rank: int, begin: int, end: int, into: np.ndarray | None = None) -> None:
        """Ask for bytes ``[begin, end)`` of ``rank``'s shard (checked against its size).

        ``into`` (uint8, ``end - begin`` bytes, e.g. the caller's tensor) is read into directly when
        the range is made of whole checksum chunks, saving a buffer and a copy; ``view`` then
        returns it.
        """
        m = self._manifest(rank)
        if not 0 <= begin <= end <= m.shard_size:
            raise ValueError(f"byte range [{begin}, {end}) is outside shard {m.shard_key} ({m.shard_size} bytes)")
        if end == begin or self._find(rank, begin, end) is not None:
            return
        if into is not None and into.nbytes == end - begin and self._widen(m, begin, end) == (begin, end):
            self._direct.append((rank, begin, end, into))
        else:
            self._wanted.setdefault(rank, []).append((begin, end))

    @staticmethod
    def _widen(m: ShardManifest, b: int, e: int) -> tuple[int, int]:
        starts = m.starts()
        lo = starts[bisect.bisect_right(starts, b) - 1]
        i = bisect.bisect_left(starts, e)
        return lo, starts[i] if i < len(starts) else m.shard_size

    def _merged(self, rank: int) -> list[tuple[int, int]]:
        m = self._manifest(rank)
        spans = sorted(self._widen(m, b, e) for b, e in self._wanted.get(rank, []))
        out: list[tuple[int, int]] = []
        for b, e in spans:
            if out and b <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], e))
            else:
                out.append((b, e))
        return out

    def _read(self, rank: int, begin: int, end: int, into: np.ndarray | None = None) -> tuple[int, int, np.ndarray]:
        m = self._manifest(rank)
        buf = np.empty(end - begin, dtype=np.uint8) if into is None else into
        try:
            self._storage.read_into(m.shard_key, buf.data, offset=begin)
        except ObjectNotFoundError:
            raise CorruptCheckpointError(
                f"step {m.step}: shard {m.shard_key} is missing", step=m.step, key=m.shard_key
            ) from None
        self._verify(m, begin, end, buf)
        return rank, begin, buf

    def add_read(self, rank: int, begin: int, buf: np.ndarray) -> None:
        """Bytes ``[begin, begin + buf.nbytes)`` of ``rank``'s shard, read before its manifest was known
        (a restore fetches a small shard together with the manifest): checked now, then served by view().

        Raises:
            CorruptCheckpointError: a chunk fails its checksum, or the range does not lie on chunk bounds.
        """
        m = self._manifest(rank)
        end = begin + buf.nbytes
        if self._find(rank, begin, end) is not None:
            return  # already read (a format 1 manifest reads its whole shard)
        if not 0 <= begin <= end <= m.shard_size or self._widen(m, begin, end) != (begin, end):
            raise CorruptCheckpointError(
                f"step {m.step}: bytes [{begin}, {end}) are not whole chunks of shard {m.shard_key}",
                step=m.step,
                key=m.shard_key,
            )
        self._verify(m, begin, end, buf)
        self.bytes_read += buf.nbytes
        bisect.insort(self._buffers.setdefault(rank, []), (begin, buf), key=lambda x: x[0])

    @staticmethod
    def _verify(m: ShardManifest, begin: int, end: int, buf: np.ndarray) -> None:
        starts = m.starts()
        first = bisect.bisect_left(starts, begin)
        for i in range(first, bisect.bisect_left(starts, end)):
            lo, hi = starts[i], starts[i + 1] if i + 1 < len(starts) else m.shard_size
            if checksum.digest(buf.data[lo - begin : hi - begin]) != m.chunks[i]:
                raise CorruptCheckpointError(
                    f"step {m.step}: shard {m.shard_key} bytes [{lo}, {hi}) fail their xxh3 checksum",
                    step=m.step,
                    key=m.shard_key,
                )

    def fetch(self) -> None:
        """Read and verify everything wanted so far (in parallel over ranges).

        Raises:
            CorruptCheckpointError: a chunk fails its checksum or the shard is gone.
            StorageError: the store failed (not a property of the data).
        """
        jobs: list[tuple[int, int, int, np.ndarray | None]] = [
            (r, b, e, None) for r in sorted(self._wanted) for b, e in self._merged(r)
        ]
        jobs += self._direct
        self._wanted.clear()
        self._direct = []
        if self._executor is not None and len(jobs) > 1:
            results = list(self._executor.map(lambda j: self._read(*j), jobs))
        else:
            results = [self._read(*j) for j in jobs]
        for rank, begin, buf in results:
            self.bytes_read += buf.nbytes
            bisect.insort(self._buffers.setdefault(rank, []), (begin, buf), key=lambda x: x[0])

    def _find(self, rank: int, begin: int, end: int) -> np.ndarray | None:
        bufs = self._buffers.get(rank, [])
        i = bisect.bisect_right(bufs, begin, key=lambda x: x[0]) - 1
        if i >= 0:
            start, buf = bufs[i]
            if end <= start + buf.nbytes:
                return buf[begin - start : end - start]
        return None

    def view(self, rank: int, begin: int, end: int) -> np.ndarray:
        """uint8 view of verified bytes ``[begin, end)`` (wanted and fetched before)."""
        if end == begin:
            return np.empty(0, dtype=np.uint8)
        found = self._find(rank, begin, end)
        if found is None:
            raise RuntimeError(f"bytes [{begin}, {end}) of rank {rank} were not fetched")
        return found
