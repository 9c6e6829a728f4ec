"""The id of the gRPC call being served, carried in a context variable down to the Slurm commands.

asyncio copies context variables into every task and ``asyncio.to_thread`` call it starts, so a
log line written by the Slurm runner deep under a SubmitJob handler carries that call's id without
any function passing it along.
"""

from __future__ import annotations

import contextvars
import re
import uuid

REQUEST_ID_HEADER = "x-request-id"
_VALID = re.compile(r"[A-Za-z0-9._:-]{1,64}")

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("clusterd_request_id", default=None)
_method: contextvars.ContextVar[str | None] = contextvars.ContextVar("clusterd_method", default=None)


def request_id_from(metadata: object) -> str:
    """The caller's ``x-request-id`` when it is a sane token, else a fresh one.

    A caller's id is reused so one id follows a request across the client's logs and ours; anything
    else (too long, odd characters) is replaced rather than written into the logs.
    """
    for key, value in metadata or ():  # type: ignore[attr-defined]
        if key.lower() == REQUEST_ID_HEADER:
            text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
            if _VALID.fullmatch(text):
                return text
    return uuid.uuid4().hex[:16]


def bind(request_id: str, method: str) -> tuple[contextvars.Token[str | None], contextvars.Token[str | None]]:
    return _request_id.set(request_id), _method.set(method)


def unbind(tokens: tuple[contextvars.Token[str | None], contextvars.Token[str | None]]) -> None:
    _request_id.reset(tokens[0])
    _method.reset(tokens[1])


def current_request_id() -> str | None:
    return _request_id.get()


def current_method() -> str | None:
    return _method.get()
