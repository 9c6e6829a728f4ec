"""The dashboard: static assets, and the JSON API under /api/, as aiohttp.web routes.

HTTP is clusterd.web.listener's (aiohttp, bounded); this module routes. Requests are served on
clusterd's event loop, so the dashboard reads exactly what the gRPC API reads, through the same
:class:`~clusterd.api.views.JobViews`, with the same rules:

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
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from google.protobuf import json_format
from google.protobuf.message import Message

from clusterctl.v1 import jobs_pb2
from clusterd.api import convert
from clusterd.api.views import JobViews
from clusterd.auth.identity import Identity
from clusterd.auth.tokens import TokenStore
from clusterd.config import Config
from clusterd.errors import InvalidArgument, ServiceError, Unauthenticated
from clusterd.jobs.manager import check_job_id
from clusterd.security.audit import status_name
from clusterd.security.limits import RateLimiter
from clusterd.slurm.types import JobState

log = logging.getLogger(__name__)

_HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "FAILED_PRECONDITION": 409,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "UNAVAILABLE": 503,
}
_ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript"),
    "/static/app.css": ("app.css", "text/css"),
}
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
}
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


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(data, separators=(",", ":")).encode(), content_type="application/json"
    )


def _error(exc: ServiceError) -> web.Response:
    code = status_name(exc)
    return _json({"error": str(exc), "code": code}, _HTTP_STATUS.get(code, 500))


def _bearer(header: str) -> str | None:
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class _Query:
    """One request's query string, checked per parameter (InvalidArgument names it), and the job
    its path names, if any (checked as the gRPC API checks it)."""

    def __init__(self, text: str, job_id: str | None = None) -> None:
        if job_id is not None:
            check_job_id(job_id)
        self.job_id = job_id or ""
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


Answer = Callable[[Identity, _Query], Awaitable[Message | dict[str, Any]]]


class WebApp:
    """The dashboard's routes and middleware, added to the listener's application by :meth:`mount`."""

    def __init__(self, config: Config, views: JobViews, tokens: TokenStore, limiter: RateLimiter | None) -> None:
        self._config = config
        self._views = views
        self._tokens = tokens
        self._limiter = limiter
        self._slots = max(1, config.web.max_concurrent)
        self._slots_per_user = max(1, self._slots // 4)
        self._busy_by_user: dict[str, int] = {}
        self._busy = 0
        self._assets = {
            path: (resources.files("clusterd.web").joinpath("static", name).read_bytes(), kind)
            for path, (name, kind) in _ASSETS.items()
        }

    @property
    def middlewares(self) -> list[Middleware]:
        """For the listener's application: what every answer of it carries, and JSON errors."""
        return [self._dressed]

    def mount(self, app: web.Application) -> None:
        """The page, its assets and /api/ (GET and HEAD; any other method is 405)."""
        for path in self._assets:
            app.router.add_get(path, self._asset)
        views = self._views
        api: dict[str, Answer] = {
            "jobs": lambda ident, q: views.list_jobs(
                ident,
                jobs_pb2.ListJobsRequest(
                    user=q.text("user"), include_finished=q.flag("finished"), limit=q.number("limit", most=100_000)
                ),
            ),
            "queue": lambda ident, q: views.list_queue(ident, jobs_pb2.ListQueueRequest(partition=q.text("partition"))),
            "history": lambda ident, q: views.list_history(ident, _history_request(q)),
            "topology": lambda ident, q: _now(views.topology()),
            "whoami": lambda ident, q: _now({"user": ident.user, "admin": ident.admin}),
            "goodput": lambda ident, q: views.fleet_goodput(ident),
        }
        for name, answer in api.items():
            app.router.add_get(f"/api/{name}", self._api(answer))
        app.router.add_get("/api/jobs/{job_id}", self._api(lambda ident, q: views.get_job(ident, q.job_id)))
        app.router.add_get(
            "/api/jobs/{job_id}/checkpoints",
            self._api(lambda ident, q: views.checkpoints(ident, jobs_pb2.ListJobCheckpointsRequest(job_id=q.job_id))),
        )
        app.router.add_get("/api/jobs/{job_id}/log", self._api(self._log_tail))
        app.router.add_get("/api/jobs/{job_id}/goodput", self._api(lambda ident, q: views.goodput(ident, q.job_id)))

    async def _asset(self, request: web.Request) -> web.StreamResponse:
        body, kind = self._assets[request.path]
        return web.Response(body=body, headers={"Content-Type": kind})

    @web.middleware
    async def _dressed(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Never cached, the page's policy on every answer; aiohttp's own refusals as the API's JSON
        (an unknown /api/ path asks for a token first, as every /api/ path does)."""
        try:
            response = await handler(request)
        except web.HTTPMethodNotAllowed:
            response = _json({"error": "the dashboard is read-only: GET only", "code": "INVALID_ARGUMENT"}, 405)
        except web.HTTPNotFound:
            path = request.path
            if path.startswith("/api/"):
                try:
                    self._authenticate(request)
                except ServiceError as exc:
                    response = _error(exc)
                else:
                    response = _json({"error": f"no API path {path}", "code": "NOT_FOUND"}, 404)
            else:
                response = _json({"error": f"no page {path}", "code": "NOT_FOUND"}, 404)
        response.headers["Cache-Control"] = "no-store"
        response.headers.update(_SECURITY_HEADERS)
        return response

    def _authenticate(self, request: web.Request) -> Identity:
        token = _bearer(request.headers.get("Authorization", ""))
        if token is None:
            raise Unauthenticated("missing 'Authorization: Bearer <token>' header")
        ident = self._tokens.authenticate(token)
        if ident is None:
            raise Unauthenticated("unknown token")
        return ident

    def _api(self, answer: Answer) -> Handler:
        """One /api/ route: authenticated, rate-limited as on gRPC, at most ``web.max_concurrent`` at
        once and a quarter of them per user (more are 503: one user's slow calls cannot take every
        slot), answered within 30 s; a ServiceError is its HTTP status."""

        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                ident = self._authenticate(request)
                if self._limiter is not None:
                    self._limiter.check(ident.user)
            except ServiceError as exc:
                return _error(exc)
            mine = self._busy_by_user.get(ident.user, 0)
            if self._busy >= self._slots or mine >= self._slots_per_user:
                return _json({"error": "too many dashboard requests at once; retry", "code": "UNAVAILABLE"}, 503)
            self._busy += 1
            self._busy_by_user[ident.user] = mine + 1
            try:
                async with asyncio.timeout(_CALL_TIMEOUT):
                    result = await answer(ident, _Query(request.query_string, request.match_info.get("job_id")))
            except ServiceError as exc:
                return _error(exc)
            except TimeoutError:
                return _json({"error": "the service did not answer in time", "code": "UNAVAILABLE"}, 503)
            except Exception:
                log.exception("dashboard request %s failed", request.path)
                return _json({"error": "internal error (see clusterd's log)", "code": "INTERNAL"}, 500)
            finally:
                self._busy -= 1
                left = self._busy_by_user.pop(ident.user) - 1
                if left:
                    self._busy_by_user[ident.user] = left
            return _json(to_json(result) if isinstance(result, Message) else result)

        return handle

    async def _log_tail(self, ident: Identity, q: _Query) -> dict[str, Any]:
        """The last lines of a job's log as text (at most 1 MiB), with the reader's notices."""
        stream = q.text("stream", "stdout")
        if stream not in ("stdout", "stderr"):
            raise InvalidArgument("stream", "must be stdout or stderr")
        lines = q.number("tail", self._config.web.log_tail_lines, most=self._config.views.max_tail_lines)
        request = jobs_pb2.ReadJobLogRequest(
            job_id=q.job_id,
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


async def _now(result: Message | dict[str, Any]) -> Message | dict[str, Any]:
    return result


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
