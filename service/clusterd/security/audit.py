"""The audit log: one JSON line per mutating call (SubmitJob, CancelJob, RequeueJob), refused or not.

Written by the domain (JobManager), which knows what a call did; the edge contributes only what
it alone knows, how the caller authenticated and from where (:func:`bind_origin`). A call's line
is written before the call is answered, so an answered call is in the file even if clusterd is
killed right after (SIGKILL); the write runs in a worker thread, so the event loop never waits on
the disk. Each line is one ``os.write`` on an O_APPEND descriptor of a 0600 file, under a lock:
lines never interleave. Every value is JSON-encoded, so a hostile job id or request id cannot
forge a second line. A failing write is logged, not raised: the call's outcome has already happened
in Slurm.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import json
import logging
import os
import threading
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
        self._lock = threading.Lock()  # one line's writes at a time; close() waits for a write in progress

    async def record(self, **fields: Any) -> None:
        """Write one line, in a worker thread; returns once it is written (or its failure logged).

        The call's origin, if bound, fills auth/peer/call_request_id.
        """
        entry = {"time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")}
        origin = _origin.get()
        if origin is not None:
            fields = {"auth": origin.auth, "peer": origin.peer, "call_request_id": origin.call_request_id} | fields
        entry.update({k: _clip(v) for k, v in fields.items()})
        line = (json.dumps(entry, separators=(",", ":"), ensure_ascii=True) + "\n").encode("ascii")
        await asyncio.to_thread(self._write, line)

    def _write(self, data: bytes) -> None:
        with self._lock:
            try:
                if self._fd < 0:
                    raise OSError("the audit log is closed")
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError as exc:
                log.error("cannot write audit log %s: %s (entry: %s)", self.path, exc, data.decode().strip())

    def close(self) -> None:
        """Close the file once a write in progress is done (lines come after the calls that wait for them)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
