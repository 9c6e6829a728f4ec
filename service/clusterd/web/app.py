"""The dashboard's WSGI application: static assets, and the JSON API under /api/.

HTTP is clusterd.web.listener's (h11, bounded); this module routes. Requests arrive on the
listener's worker threads and everything that touches the service's state runs on clusterd's loop
(:func:`asyncio.run_coroutine_threadsafe`), so the dashboard reads exactly what the gRPC API reads,
through the same :class:`~clusterd.api.views.JobViews`, with the same rules:

* Authentication: ``Authorization: Bearer <token>``, the tokens of the gRPC API (TokenStore).
  The page itself and its assets hold no data and are served to anyone (a login form needs
  them); every /api/ path without a valid token is 401.
* Authorization: a user sees their own jobs; another user's job is 403, as GetJob refuses it.
  The per-user request rate applies as on gRPC.
* Read-only: GET (and HEAD) only. Answers are never cached; the page may run only its own scripts
  (Content-Security-Policy), and it renders user-controlled text as text, never as markup.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from google.protobuf import json_format
from google.protobuf.message import Message

from clusterctl.v1 import jobs_pb2
from clusterd.api import convert
from clusterd.api.views import JobViews
from clusterd.auth.identity import Identity
from clusterd.auth.tokens import TokenStore
from clusterd.config import Config
from clusterd.errors import InvalidArgument, NotFound, ServiceError, Unauthenticated
from clusterd.jobs.manager import check_job_id
from clusterd.security.audit import status_name
from clusterd.security.limits import RateLimiter
from clusterd.slurm.types import JobState

log = logging.getLogger(__name__)

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

_HTTP_STATUS = {
    "INVALID_ARGUMENT": "400 Bad Request",
    "UNAUTHENTICATED": "401 Unauthorized",
    "PERMISSION_DENIED": "403 Forbidden",
    "NOT_FOUND": "404 Not Found",
    "FAILED_PRECONDITION": "409 Conflict",
    "ALREADY_EXISTS": "409 Conflict",
    "RESOURCE_EXHAUSTED": "429 Too Many Requests",
    "UNAVAILABLE": "503 Service Unavailable",
}
_ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript"),
    "/static/app.css": ("app.css", "text/css"),
}
_SECURITY_HEADERS = [
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
    ),
]
_CALL_TIMEOUT = 30.0
_MAX_LOG_BYTES = 1 << 20


def to_json(message: Message) -> dict[str, Any]:
    """The shape ``clusterctl ... --json`` prints: proto field names, every field present."""
    return json_format.MessageToDict(
        message,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
        unquote_int64_if_possible=True,
    )


@dataclass(frozen=True)
class Response:
    status: str
    body: bytes
    content_type: str = "application/json"


def _json(data: Any, status: str = "200 OK") -> Response:
    return Response(status, json.dumps(data, separators=(",", ":")).encode())


def _error(exc: ServiceError) -> Response:
    code = status_name(exc)
    return _json({"error": str(exc), "code": code}, _HTTP_STATUS.get(code, "500 Internal Server Error"))


def _bearer(header: str) -> str | None:
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class _Query:
    """One request's query string, checked per parameter (InvalidArgument names it)."""

    def __init__(self, text: str) -> None:
        try:
            self._values = parse_qs(text, keep_blank_values=True, strict_parsing=False, max_num_fields=50)
        except ValueError as exc:
            raise InvalidArgument("query", str(exc)) from None

    def text(self, name: str, default: str = "") -> str:
        values = self._values.get(name)
        return values[-1] if values else default

    def number(self, name: str, default: int = 0, *, most: int = 1 << 31) -> int:
        raw = self.text(name)
        if not raw:
            return default
        if not raw.isdigit() or int(raw) > most:
            raise InvalidArgument(name, f"must be a whole number from 0 to {most}")
        return int(raw)

    def flag(self, name: str) -> bool:
        return self.text(name).lower() in ("1", "true", "yes")

    def list(self, name: str) -> list[str]:
        return [v for raw in self._values.get(name, []) for v in raw.split(",") if v]


class WebApp:
    """The WSGI callable; ``loop`` is clusterd's event loop, where every API call runs."""

    def __init__(
        self,
        config: Config,
        views: JobViews,
        tokens: TokenStore,
        limiter: RateLimiter | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._config = config
        self._views = views
        self._tokens = tokens
        self._limiter = limiter
        self._loop = loop
        self._slots = threading.BoundedSemaphore(max(1, config.web.max_concurrent))
        self._assets = {
            path: (resources.files("clusterd.web").joinpath("static", name).read_bytes(), kind)
            for path, (name, kind) in _ASSETS.items()
        }

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/") or "/"
        if method not in ("GET", "HEAD"):
            response = _json(
                {"error": "the dashboard is read-only: GET only", "code": "INVALID_ARGUMENT"}, "405 Method Not Allowed"
            )
        elif path in self._assets:
            body, kind = self._assets[path]
            response = Response("200 OK", body, kind)
        elif path.startswith("/api/"):
            response = self._api(environ, path)
        else:
            response = _json({"error": f"no page {path}", "code": "NOT_FOUND"}, "404 Not Found")
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            ("Cache-Control", "no-store"),
            *_SECURITY_HEADERS,
        ]
        start_response(response.status, headers)
        return [b"" if method == "HEAD" else response.body]

    def _api(self, environ: dict[str, Any], path: str) -> Response:
        if not self._slots.acquire(blocking=False):
            return _json(
                {"error": "too many dashboard requests at once; retry", "code": "UNAVAILABLE"},
                "503 Service Unavailable",
            )
        try:
            future = asyncio.run_coroutine_threadsafe(
                self._handle(environ.get("HTTP_AUTHORIZATION", ""), path, environ.get("QUERY_STRING", "")), self._loop
            )
            return future.result(_CALL_TIMEOUT)
        except TimeoutError:
            return _json(
                {"error": "the service did not answer in time", "code": "UNAVAILABLE"}, "503 Service Unavailable"
            )
        except Exception:
            log.exception("dashboard request %s failed", path)
            return _json(
                {"error": "internal error (see clusterd's log)", "code": "INTERNAL"}, "500 Internal Server Error"
            )
        finally:
            self._slots.release()

    async def _handle(self, authorization: str, path: str, query: str) -> Response:
        """On the event loop: authenticate, rate-limit, route."""
        try:
            token = _bearer(authorization)
            if token is None:
                raise Unauthenticated("missing 'Authorization: Bearer <token>' header")
            ident = self._tokens.authenticate(token)
            if ident is None:
                raise Unauthenticated("unknown token")
            if self._limiter is not None:
                self._limiter.check(ident.user)
            return await self._route(ident, path, _Query(query))
        except ServiceError as exc:
            return _error(exc)

    async def _route(self, ident: Identity, path: str, q: _Query) -> Response:
        parts = [p for p in path.split("/") if p][1:]  # after "api"
        views = self._views
        routes: dict[tuple[str, ...], Callable[[], Awaitable[Message | dict[str, Any]]]] = {
            ("jobs",): lambda: views.list_jobs(
                ident,
                jobs_pb2.ListJobsRequest(
                    user=q.text("user"), include_finished=q.flag("finished"), limit=q.number("limit", most=100_000)
                ),
            ),
            ("queue",): lambda: views.list_queue(ident, jobs_pb2.ListQueueRequest(partition=q.text("partition"))),
            ("history",): lambda: views.list_history(ident, _history_request(q)),
            ("topology",): self._topology,
            ("whoami",): self._whoami(ident),
        }
        if len(parts) == 1 and tuple(parts) in routes:
            return _answer(await routes[tuple(parts)]())
        if len(parts) in (2, 3) and parts[0] == "jobs":
            job_id = parts[1]
            check_job_id(job_id)
            if len(parts) == 2:
                return _answer(await views.get_job(ident, job_id))
            if parts[2] == "checkpoints":
                return _answer(await views.checkpoints(ident, jobs_pb2.ListJobCheckpointsRequest(job_id=job_id)))
            if parts[2] == "log":
                return _json(await self._log_tail(ident, job_id, q))
        raise NotFound(f"no API path {path}")

    async def _topology(self) -> Message:
        return self._views.topology()

    def _whoami(self, ident: Identity) -> Callable[[], Awaitable[dict[str, Any]]]:
        async def answer() -> dict[str, Any]:
            return {"user": ident.user, "admin": ident.admin}

        return answer

    async def _log_tail(self, ident: Identity, job_id: str, q: _Query) -> dict[str, Any]:
        """The last lines of a job's log as text (at most 1 MiB), with the reader's notices."""
        stream = q.text("stream", "stdout")
        if stream not in ("stdout", "stderr"):
            raise InvalidArgument("stream", "must be stdout or stderr")
        lines = q.number("tail", self._config.web.log_tail_lines, most=self._config.views.max_tail_lines)
        request = jobs_pb2.ReadJobLogRequest(
            job_id=job_id,
            tail_lines=lines or self._config.web.log_tail_lines,
            stream=jobs_pb2.LOG_STREAM_STDERR if stream == "stderr" else jobs_pb2.LOG_STREAM_STDOUT,
        )
        data, notices, path, truncated = bytearray(), [], "", False
        async for chunk in self._views.read_log(ident, request):
            path = chunk.path or path
            if chunk.notice:
                notices.append(chunk.notice)
            data += chunk.data
            if len(data) > _MAX_LOG_BYTES:
                del data[: len(data) - _MAX_LOG_BYTES]
                truncated = True
        return {"path": path, "text": data.decode("utf-8", "replace"), "notices": notices, "truncated": truncated}


def _answer(result: Message | dict[str, Any]) -> Response:
    return _json(to_json(result) if isinstance(result, Message) else result)


def _history_request(q: _Query) -> jobs_pb2.ListHistoryRequest:
    request = jobs_pb2.ListHistoryRequest(
        name=q.text("name"), user=q.text("user"), limit=q.number("limit", most=100_000)
    )
    for state in q.list("state"):
        name = f"JOB_STATE_{state.upper()}"
        if name not in jobs_pb2.JobState.keys():  # noqa: SIM118 - an EnumTypeWrapper, not a dict
            raise InvalidArgument("state", f"unknown job state {state!r}")
        request.states.append(convert.job_state(JobState(name.removeprefix("JOB_STATE_"))))
    for field in ("since", "until"):
        seconds = q.number(field, most=1 << 40)
        if seconds:
            getattr(request, field).FromSeconds(seconds)
    return request
