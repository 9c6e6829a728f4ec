"""The tier's memory: objects of one job by (namespace, key), each with its xxh3 chunk digests.

A namespace is a checkpoint URI. Every object is hashed once when it arrives (in the tier's
process, not the trainer's) in 1 MiB chunks; a read verifies the chunks it serves, so a copy
damaged in memory is reported as corrupt instead of served. Memory is capped: a new object that
does not fit drops whole steps, oldest first (steps already durable on the URI before the others),
never the step being written; a step that alone exceeds the cap is refused with TierFullError.
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
            dropped = self._evict(ns, step, need) if need > 0 else []
            if self._used - freed + size > self.cap:
                mine = sum(len(o.data) for (n, k), o in self._objects.items() if n == ns and key_step(k) == step)
                raise TierFullError(
                    f"step {step} needs {mine - freed + size} bytes in this node's memory tier, more than its cap "
                    f"of {self.cap} bytes (raise the tier's memory cap or save less per node)"
                )
            self._objects[(ns, key)] = obj
            self._used += size - freed
            return dropped

    def _evict(self, ns: str, keep_step: int | None, need: int) -> list[tuple[str, str]]:
        steps: dict[tuple[str, int], list[tuple[str, str]]] = {}
        for n, k in self._objects:
            s = key_step(k)
            if s is not None and not (n == ns and s == keep_step):
                steps.setdefault((n, s), []).append((n, k))

        def durable(item: tuple[tuple[str, int], list[tuple[str, str]]]) -> bool:
            return all(self._objects[x].durable for x in item[1])

        order = sorted(steps.items(), key=lambda it: (not durable(it), it[0][1]))
        dropped: list[tuple[str, str]] = []
        for (n, s), keys in order:
            if need <= 0:
                break
            if not all(self._objects[x].durable for x in keys):
                log.warning("memory tier: dropped step %d of %s before it was uploaded (memory cap)", s, n)
            for x in keys:
                need -= len(self._objects[x].data)
                self._used -= len(self._objects.pop(x).data)
                dropped.append(x)
        return dropped

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
