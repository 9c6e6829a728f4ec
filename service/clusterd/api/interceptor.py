"""One interceptor for every RPC, unary and streaming alike: authenticate, record, map errors.

It wraps each method handler so that the caller's identity is set in a context variable inside
the handler's own task, and so that a :class:`ServiceError` raised anywhere below becomes exactly
one gRPC status (security/audit.py's table names it). It records each call (request id, metrics,
a log line) and binds what only the edge knows (how the caller authenticated, the peer) for the
audit line the domain writes. The one policy it applies is the per-user request rate, because it
guards every service alike and refuses before any handler work; job quotas, watcher caps and the
audit log live in the domain (JobManager, security/limits.py, security/audit.py).

A caller is identified by its bearer token; without one, an mTLS client whose verified
certificate CN is in ``cn_users`` is that user. A token that is present but wrong is refused even
when the certificate would map: an explicit credential that fails is never silently replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from clusterd.auth.identity import Identity, reset_identity, set_identity
from clusterd.auth.tokens import TokenStore
from clusterd.errors import ServiceError, Unauthenticated
from clusterd.observability import context as request_context
from clusterd.observability.metrics import RPC_LATENCY, RPCS
from clusterd.security.audit import Origin, bind_origin, status_name, unbind_origin
from clusterd.security.limits import RateLimiter
from clusterd.security.transport import peer_common_name

log = logging.getLogger(__name__)

# Served to anyone: load balancers and grpcurl need them before they hold a token.
_PUBLIC_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
# Authenticated by the handler itself with a credential inside the request (a job's heartbeat
# token, which names one record); recorded like every call, but no user identity is bound.
_SELF_AUTHENTICATED = frozenset({"/clusterctl.v1.JobService/Heartbeat"})


def status_code(exc: ServiceError) -> grpc.StatusCode:
    return grpc.StatusCode[status_name(exc)]


def _bearer(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key.lower() == "authorization":
            text = value.decode() if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(
        self,
        tokens: TokenStore,
        *,
        cn_users: dict[str, Identity] | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._tokens = tokens
        self._cn_users = cn_users or {}
        self._limiter = limiter

    def _identify(self, context: grpc.aio.ServicerContext) -> tuple[Identity, str]:
        """(identity, how): ``how`` is "token" or "mtls", for the audit line."""
        token = _bearer(context.invocation_metadata())
        if token is not None:
            ident = self._tokens.authenticate(token)
            if ident is None:
                raise Unauthenticated("unknown token")
            return ident, "token"
        if self._cn_users:
            cn = peer_common_name(context.auth_context())
            if cn is not None and cn in self._cn_users:
                return self._cn_users[cn], "mtls"
        raise Unauthenticated("missing 'authorization: Bearer <token>' metadata")

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(_PUBLIC_PREFIXES):
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(handler.unary_unary, method, authenticate=method not in _SELF_AUTHENTICATED),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # the API has no client-streaming methods

    def _admit(self, context: grpc.aio.ServicerContext, call: _Call) -> tuple[Identity, _Bound]:
        """Authenticate, apply the rate limit, and bind the caller for the handler's task."""
        ident, how = self._identify(context)
        if self._limiter is not None:
            self._limiter.check(ident.user)
        return ident, _Bound(ident, Origin(auth=how, peer=context.peer(), call_request_id=call.request_id))

    def _wrap_unary(
        self, behavior: Callable[..., Any], method: str, *, authenticate: bool = True
    ) -> Callable[..., Any]:
        label = _label(method)

        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            ident: Identity | None = None
            code = grpc.StatusCode.UNKNOWN
            call = _Call(context, label)
            try:
                if not authenticate:
                    response = await behavior(request, context)
                    code = grpc.StatusCode.OK
                    return response
                ident, bound = self._admit(context, call)
                with bound:
                    response = await behavior(request, context)
                code = grpc.StatusCode.OK
                return response
            except ServiceError as exc:
                code = status_code(exc)
                await _abort(context, method, exc)
            except BaseException as exc:
                code = _code_of(context, exc)
                raise
            finally:
                call.end(code, ident)

        return wrapper

    def _wrap_stream(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        label = _label(method)

        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            ident: Identity | None = None
            code = grpc.StatusCode.UNKNOWN
            call = _Call(context, label)
            try:
                ident, bound = self._admit(context, call)
                with bound:
                    async for item in behavior(request, context):
                        yield item
                code = grpc.StatusCode.OK
            except ServiceError as exc:
                code = status_code(exc)
                await _abort(context, method, exc)
            except BaseException as exc:
                code = _code_of(context, exc)
                raise
            finally:
                call.end(code, ident)

        return wrapper


class _Bound:
    """The caller's identity and origin set in context variables for the body of a ``with``."""

    def __init__(self, ident: Identity, origin: Origin) -> None:
        self._ident = ident
        self._origin = origin

    def __enter__(self) -> None:
        self._tokens = (set_identity(self._ident), bind_origin(self._origin))

    def __exit__(self, *exc: object) -> None:
        # A stream whose caller went away is closed by the event loop's async-generator finalizer,
        # in another context than the one the variables were set in: nothing is left to reset there.
        with contextlib.suppress(ValueError):
            reset_identity(self._tokens[0])
            unbind_origin(self._tokens[1])


def _label(method: str) -> str:
    """``/clusterctl.v1.JobService/SubmitJob`` -> ``JobService/SubmitJob``: short, still unambiguous."""
    service, _, name = method.lstrip("/").rpartition("/")
    return f"{service.rsplit('.', 1)[-1]}/{name}"


class _Call:
    """One RPC's request id (bound for log lines and sent back to the caller), clock and metrics."""

    def __init__(self, context: grpc.aio.ServicerContext, label: str) -> None:
        self.label = label
        self.request_id = request_context.request_id_from(context.invocation_metadata())
        self._tokens = request_context.bind(self.request_id, label)
        self._started = time.perf_counter()
        # Trailing metadata reaches the caller on success and on abort alike.
        context.set_trailing_metadata(((request_context.REQUEST_ID_HEADER, self.request_id),))

    def end(self, code: grpc.StatusCode, ident: Identity | None) -> None:
        seconds = time.perf_counter() - self._started
        RPCS.labels(method=self.label, code=code.name).inc()
        RPC_LATENCY.labels(method=self.label).observe(seconds)
        log.info(
            "rpc %s %s",
            self.label,
            code.name,
            extra={"code": code.name, "duration_ms": round(seconds * 1000, 2), "caller": ident.user if ident else None},
        )
        with contextlib.suppress(ValueError):  # closed from another context: see _Bound.__exit__
            request_context.unbind(self._tokens)


def _code_of(context: grpc.aio.ServicerContext, exc: BaseException) -> grpc.StatusCode:
    """The status an unexpected exit ends with: a servicer's own abort, a disconnect, or a crash."""
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):  # GeneratorExit: a stream's caller left
        return grpc.StatusCode.CANCELLED
    code = context.code() if hasattr(context, "code") else None
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


async def _abort(context: grpc.aio.ServicerContext, method: str, exc: ServiceError) -> None:
    code = status_code(exc)
    log.info("%s -> %s: %s", method, code.name, exc)
    await context.abort(code, str(exc))
