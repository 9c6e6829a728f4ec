"""An in-memory :class:`~clusterctl.storage.base.Storage` for unit tests.

Behaves like the real backends (atomic puts, create-only puts, recursive listing, incomplete
uploads) and adds two test seams: ``clock`` (object mtimes) and ``fault`` (a callable run before
every operation that may raise to simulate an outage or a slow store).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence

from .base import Buffer, IncompleteUpload, ObjectInfo, validate_key
from .errors import ObjectExistsError, ObjectNotFoundError, StorageError

FaultHook = Callable[[str, str], None]


class MemoryStorage:
    """Thread-safe dict of key -> bytes."""

    def __init__(self, *, clock: Callable[[], float] = time.time, fault: FaultHook | None = None) -> None:
        self._objects: dict[str, tuple[bytes, float]] = {}
        self._incomplete: dict[str, IncompleteUpload] = {}
        self._lock = threading.Lock()
        self.clock = clock
        self.fault = fault

    @property
    def uri(self) -> str:
        return f"memory://{id(self):x}"

    def _hook(self, op: str, key: str) -> None:
        if self.fault is not None:
            self.fault(op, key)

    def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
        validate_key(key)
        self._hook("put", key)
        blob = bytes(data)
        with self._lock:
            if if_absent and key in self._objects:
                raise ObjectExistsError(f"{key} already exists", key=key)
            self._objects[key] = (blob, self.clock())

    def _blob(self, key: str) -> bytes:
        """The stored bytes of ``key`` (after the ``get`` fault hook), or ObjectNotFoundError."""
        validate_key(key)
        self._hook("get", key)
        with self._lock:
            if key not in self._objects:
                raise ObjectNotFoundError(f"{key} not found", key=key)
            return self._objects[key][0]

    def get(self, key: str, *, max_size: int | None = None) -> bytes:
        blob = self._blob(key)
        if max_size is not None and len(blob) > max_size:
            raise StorageError(f"{key} is {len(blob)} bytes, more than the {max_size} expected", key=key)
        return blob

    def read_into(self, key: str, out: memoryview, *, offset: int = 0) -> None:
        blob = self._blob(key)
        end = offset + len(out)
        if end > len(blob):
            raise StorageError(f"{key} is {len(blob)} bytes, cannot read [{offset}, {end})", key=key)
        out[:] = blob[offset:end]

    def stat(self, key: str) -> ObjectInfo:
        validate_key(key)
        self._hook("stat", key)
        with self._lock:
            if key not in self._objects:
                raise ObjectNotFoundError(f"{key} not found", key=key)
            blob, mtime = self._objects[key]
        return ObjectInfo(key, len(blob), mtime)

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        validate_key(prefix, allow_empty=True, what="prefix")
        self._hook("list", prefix)
        with self._lock:
            items = [ObjectInfo(k, len(b), m) for k, (b, m) in self._objects.items() if k.startswith(prefix)]
        return sorted(items, key=lambda o: o.key)

    def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            validate_key(key)
            self._hook("delete", key)
        with self._lock:
            for key in keys:
                self._objects.pop(key, None)

    def prepare_prefix(self, prefix: str) -> None:
        validate_key(prefix, allow_empty=True, what="prefix")

    def list_incomplete(self, prefix: str) -> list[IncompleteUpload]:
        with self._lock:
            return [u for u in self._incomplete.values() if u.key.startswith(prefix)]

    def abort_incomplete(self, upload: IncompleteUpload) -> None:
        with self._lock:
            self._incomplete.pop(upload.handle, None)

    def close(self) -> None:
        pass

    # --- test helpers -------------------------------------------------------------------
    def start_incomplete(self, key: str) -> IncompleteUpload:
        """Record an abandoned write (what a killed writer leaves behind)."""
        upload = IncompleteUpload(validate_key(key), uuid.uuid4().hex, self.clock())
        with self._lock:
            self._incomplete[upload.handle] = upload
        return upload

    def raw(self, key: str) -> bytes:
        """The stored bytes, bypassing faults."""
        with self._lock:
            return self._objects[key][0]

    def overwrite(self, key: str, data: bytes) -> None:
        """Replace an object's bytes without changing its mtime (to simulate corruption)."""
        with self._lock:
            self._objects[key] = (bytes(data), self._objects[key][1])
