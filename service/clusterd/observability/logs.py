"""clusterd's log lines: one JSON object per line (default) or plain text, both with the request id."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

from clusterd.auth.identity import peek_identity
from clusterd.observability.context import current_method, current_request_id

_JSON_FIELDS = "{levelname}{name}{message}"
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


class RequestContextFilter(logging.Filter):
    """Stamps every record with the current call's request id, method and user (None outside a call)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ident = peek_identity()
        record.request_id = current_request_id()
        record.method = current_method()
        record.user = ident.user if ident is not None else None
        return True


def configure_logging(fmt: str = "json", level: str = "INFO", stream: TextIO | None = None) -> None:
    """Route the root logger to ``stream`` (stderr) in ``fmt``; safe to call more than once."""
    if fmt not in ("json", "text"):
        raise ValueError(f"log_format must be 'json' or 'text', got {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RequestContextFilter())
    if fmt == "json":
        handler.setFormatter(
            JsonFormatter(
                _JSON_FIELDS,
                style="{",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="time",  # ISO 8601 in UTC
            )
        )
    else:
        handler.setFormatter(logging.Formatter(_TEXT_FORMAT))
    # No format here shows where a call was made or from which thread or process: skip finding
    # those for every record (the logging HOWTO's "Optimization"; about a quarter of a line's cost).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
