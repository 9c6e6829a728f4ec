"""The tier's memory: objects of one job by (namespace, key), each with its xxh3 chunk digests.

A namespace is a checkpoint URI. Every object is hashed once when it arrives (in the tier's
process, not the trainer's) in 1 MiB chunks; a read verifies the chunks it serves, so a copy
damaged in memory is reported as corrupt instead of served. Memory is capped: a new object that
does not fit drops whole steps, oldest first (steps already durable on the URI before the others),
never the step being written and never a namespace's newest committed step while it is not yet on
the URI (the only restorable copy). A put that would not fit even then is refused with
TierFullError and drops nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ..checkpoint import checksum, layout
from .errors import TierCorruptError, TierFullError

log = logging.getLogger(__name__)
CHUNK = 1 << 20


def key_step(key: str) -> int | None:
    """The step an object belongs to (None for objects outside steps, e.g. probes)."""
    parsed = layout.parse_step_key(key)
    if parsed is not None:
        return parsed[0]
    return layout.parse_commit_key(key)


def chunk_digests(data: memoryview) -> list[str]:
    return [checksum.digest(data[i : i + CHUNK]) for i in range(0, len(data), CHUNK)]


@dataclass
class StoredObject:
    data: bytearray
    digests: list[str]
    primary: bool  # written here by a rank (uploaded by this tier) or a replica from a peer
    mtime: float = field(default_factory=time.time)
    durable: bool = False

    def range_digests(self, offset: int, length: int) -> list[tuple[int, str]]:
        """(size, xxh3) of each piece of ``data[offset:offset+length]`` cut at chunk boundaries: the
        digests taken at put for whole chunks, so that the reader's check covers this copy's memory
        as well as the wire without hashing here; a partial chunk at either end is checked here and
        its part hashed."""
        if length == 0:
            return []
        view = memoryview(self.data)
        out: list[tuple[int, str]] = []
        end = offset + length
        for i in range(offset // CHUNK, (end - 1) // CHUNK + 1):
            start, stop = i * CHUNK, min((i + 1) * CHUNK, len(view))
            a, b = max(offset, start), min(end, stop)
            if (a, b) == (start, stop):
                out.append((b - a, self.digests[i]))
                continue
            if checksum.digest(view[start:stop]) != self.digests[i]:
                raise TierCorruptError(f"chunk {i} of the copy in memory failed its xxh3 digest")
            out.append((b - a, checksum.digest(view[a:b])))
        return out

    def verified_range(self, offset: int, length: int) -> memoryview:
        """``data[offset:offset+length]`` after checking the chunks that cover it."""
        view = memoryview(self.data)
        if length == 0:
            return view[offset:offset]
        for i in range(offset // CHUNK, (offset + length - 1) // CHUNK + 1):
            if checksum.digest(view[i * CHUNK : (i + 1) * CHUNK]) != self.digests[i]:
                raise TierCorruptError(f"chunk {i} of the copy in memory failed its xxh3 digest")
        return view[offset : offset + length]


class TierStore:
    """Thread-safe bounded map of (namespace, key) to :class:`StoredObject`."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap = cap_bytes
        self._objects: dict[tuple[str, str], StoredObject] = {}
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def put(self, ns: str, key: str, obj: StoredObject, *, if_absent: bool = False) -> list[tuple[str, str]]:
        """Store ``obj``; returns the (ns, key) of objects dropped to make room.

        Raises:
            FileExistsError: ``if_absent`` and the key exists.
            TierFullError: the object's step does not fit the cap on its own.
        """
        size = len(obj.data)
        step = key_step(key)
        with self._lock:
            old = self._objects.get((ns, key))
            if if_absent and old is not None:
                raise FileExistsError(key)
            freed = len(old.data) if old is not None else 0
            need = self._used - freed + size - self.cap
            victims = self._victims(ns, step, need) if need > 0 else []
            if need - sum(len(self._objects[x].data) for _, keys in victims for x in keys) > 0:
                mine = sum(len(o.data) for (n, k), o in self._objects.items() if n == ns and key_step(k) == step)
                raise TierFullError(
                    f"step {step} needs {mine - freed + size} bytes in this node's memory tier, more than its cap "
                    f"of {self.cap} bytes less the newest committed steps not yet uploaded (raise the tier's "
                    "memory cap or save less per node)"
                )
            dropped: list[tuple[str, str]] = []
            for (n, s), keys in victims:  # decided first: nothing is dropped for a put that is refused
                if not all(self._objects[x].durable for x in keys):
                    log.warning("memory tier: dropped step %d of %s before it was uploaded (memory cap)", s, n)
                for x in keys:
                    self._used -= len(self._objects.pop(x).data)
                    dropped.append(x)
            self._objects[(ns, key)] = obj
            self._used += size - freed
            return dropped

    def _victims(
        self, ns: str, keep_step: int | None, need: int
    ) -> list[tuple[tuple[str, int], list[tuple[str, str]]]]:
        """The steps to drop for ``need`` bytes, oldest first, durable ones before the others (may fall short)."""
        steps: dict[tuple[str, int], list[tuple[str, str]]] = {}
        newest: dict[str, int] = {}  # per namespace, its newest committed step
        for n, k in self._objects:
            s = key_step(k)
            if s is not None and not (n == ns and s == keep_step):
                steps.setdefault((n, s), []).append((n, k))
            c = layout.parse_commit_key(k)
            if c is not None and c > newest.get(n, -1):
                newest[n] = c

        def durable(keys: list[tuple[str, str]]) -> bool:
            return all(self._objects[x].durable for x in keys)

        order = sorted(
            (it for it in steps.items() if newest.get(it[0][0]) != it[0][1] or durable(it[1])),
            key=lambda it: (not durable(it[1]), it[0][1]),
        )
        chosen = []
        for item in order:
            if need <= 0:
                break
            chosen.append(item)
            need -= sum(len(self._objects[x].data) for x in item[1])
        return chosen

    def get(self, ns: str, key: str) -> StoredObject | None:
        with self._lock:
            return self._objects.get((ns, key))

    def listing(self, ns: str, prefix: str) -> list[tuple[str, int, float]]:
        with self._lock:
            return sorted(
                (k, len(o.data), o.mtime) for (n, k), o in self._objects.items() if n == ns and k.startswith(prefix)
            )

    def delete(self, ns: str, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                obj = self._objects.pop((ns, key), None)
                if obj is not None:
                    self._used -= len(obj.data)

    def mark_durable(self, ns: str, key: str) -> None:
        with self._lock:
            obj = self._objects.get((ns, key))
            if obj is not None:
                obj.durable = True
