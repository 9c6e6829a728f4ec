"""The audit log: one JSON line per mutating call (SubmitJob, CancelJob, RequeueJob), refused or not.

Written by the domain (JobManager), which knows what a call did; the edge contributes only what
it alone knows, how the caller authenticated and from where (:func:`bind_origin`). Lines go to a
writer thread, so the event loop never waits on the disk; each is one ``os.write`` on an O_APPEND
descriptor of a 0600 file: lines never interleave, and a crash loses at most what was queued.
Every value is JSON-encoded, so a hostile job id or request id cannot forge a second line. A
failing write is logged, not raised: the call's outcome has already happened in Slurm.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterd.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    ServiceError,
    SlurmError,
    SlurmUnavailable,
    Unauthenticated,
    Unavailable,
)

log = logging.getLogger(__name__)

_MAX_FIELD = 256
_COALESCE_SECONDS = 0.02  # a line waits this long at most for others to share its write
_BATCH_LINES = 1000  # lines written at once at most (about 0.5 MB)

# Each error class's status name: what the audit line says and what the gRPC edge answers.
STATUS_NAMES: tuple[tuple[type[ServiceError], str], ...] = (
    (InvalidArgument, "INVALID_ARGUMENT"),
    (Unauthenticated, "UNAUTHENTICATED"),
    (PermissionDenied, "PERMISSION_DENIED"),
    (NotFound, "NOT_FOUND"),
    (FailedPrecondition, "FAILED_PRECONDITION"),
    (ResourceExhausted, "RESOURCE_EXHAUSTED"),
    (AlreadyExists, "ALREADY_EXISTS"),
    (Unavailable, "UNAVAILABLE"),
    (OutOfRange, "OUT_OF_RANGE"),
    (SlurmUnavailable, "UNAVAILABLE"),
    (SlurmError, "INTERNAL"),
)


def status_name(exc: BaseException) -> str:
    """The status a call that raised ``exc`` ends with (CANCELLED for a caller gone away)."""
    for cls, name in STATUS_NAMES:
        if isinstance(exc, cls):
            return name
    return "CANCELLED" if isinstance(exc, asyncio.CancelledError) else "INTERNAL"


@dataclass(frozen=True)
class Origin:
    auth: str  # "token" or "mtls"
    peer: str
    call_request_id: str


_origin: contextvars.ContextVar[Origin | None] = contextvars.ContextVar("clusterd_call_origin", default=None)


def bind_origin(origin: Origin) -> contextvars.Token[Origin | None]:
    """Set by the edge for the duration of one call (asyncio carries it into the handler's tasks)."""
    return _origin.set(origin)


def unbind_origin(token: contextvars.Token[Origin | None]) -> None:
    _origin.reset(token)


def _clip(value: Any) -> Any:
    return value[:_MAX_FIELD] if isinstance(value, str) else value


class AuditLog:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.fchmod(self._fd, 0o600)  # a file an older version left readable
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_lines, name="audit-writer", daemon=True)
        self._writer.start()

    def record(self, **fields: Any) -> None:
        """Queue one line (never blocks); the call's origin, if bound, fills auth/peer/call_request_id."""
        entry = {"time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")}
        origin = _origin.get()
        if origin is not None:
            fields = {"auth": origin.auth, "peer": origin.peer, "call_request_id": origin.call_request_id} | fields
        entry.update({k: _clip(v) for k, v in fields.items()})
        self._lines.put((json.dumps(entry, separators=(",", ":"), ensure_ascii=True) + "\n").encode("ascii"))

    def _write_lines(self) -> None:
        """Write what is queued, in one write per wake-up, and wake at most every
        :data:`_COALESCE_SECONDS`: in a submit storm each wake-up would take the GIL from the event
        loop for one line. Each line is whole, so O_APPEND keeps them from interleaving."""
        closing = False
        while not closing:
            batch = [self._lines.get()]
            if batch[0] is not None:
                time.sleep(_COALESCE_SECONDS)  # what else arrives meanwhile goes in the same write
            while not self._lines.empty() and len(batch) < _BATCH_LINES:
                batch.append(self._lines.get_nowait())
            closing = None in batch
            data = b"".join(line for line in batch if line is not None)
            try:
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError as exc:
                log.error("cannot write audit log %s: %s (entries: %s)", self.path, exc, data.decode().strip())

    def close(self) -> None:
        """Write what is queued, then close (blocks briefly: call it at shutdown)."""
        if self._fd >= 0:
            self._lines.put(None)
            self._writer.join()
            os.close(self._fd)
            self._fd = -1
