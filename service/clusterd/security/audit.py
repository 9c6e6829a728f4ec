"""The audit log: one JSON line per mutating call (SubmitJob, CancelJob, RequeueJob), refused or not.

Written by the interceptor, which alone sees the method, the authenticated caller, the peer and the
final status, so servicers stay unaware of it. Each record is one ``os.write`` on an O_APPEND
descriptor: lines from concurrent calls never interleave, and a crash loses at most the call in
progress. The write is a few microseconds into the page cache, so it stays on the event loop
rather than paying a thread hop per call. Every value is JSON-encoded, so a hostile job id or
request id cannot forge a second line. A failing write is logged, not raised: the call's outcome
has already happened in Slurm and must not be reported as a failure.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

AUDITED_METHODS = frozenset({"SubmitJob", "CancelJob", "RequeueJob"})
_MAX_FIELD = 256


def _clip(value: Any) -> Any:
    return value[:_MAX_FIELD] if isinstance(value, str) else value


class AuditLog:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def record(self, **fields: Any) -> None:
        entry = {"time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")}
        entry.update({k: _clip(v) for k, v in fields.items()})
        line = json.dumps(entry, separators=(",", ":"), ensure_ascii=True) + "\n"
        try:
            os.write(self._fd, line.encode("ascii"))
        except OSError as exc:
            log.error("cannot write audit log %s: %s (entry: %s)", self.path, exc, line.strip())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
