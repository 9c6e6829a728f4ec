"""One interceptor for every RPC, unary and streaming alike: authenticate, limit, audit, map errors.

It wraps each method handler so that the caller's identity is set in a context variable inside
the handler's own task, and so that a :class:`ServiceError` raised anywhere below becomes exactly
one gRPC status (the table below is the only place that mapping lives). Because it alone sees the
method, the caller, the peer and the final status, it also applies the per-user rate limit and
job quota (before the servicer runs, so a refused call costs no Slurm or store work) and writes
the audit line of every mutating call, refused ones included.

A caller is identified by its bearer token; without one, an mTLS client whose verified
certificate CN is in ``cn_users`` is that user. A token that is present but wrong is refused even
when the certificate would map: an explicit credential that fails is never silently replaced.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from clusterd.auth.identity import Identity, reset_identity, set_identity
from clusterd.auth.tokens import TokenStore
from clusterd.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    ServiceError,
    SlurmError,
    SlurmUnavailable,
    Unauthenticated,
)
from clusterd.observability import context as request_context
from clusterd.observability.metrics import RPC_LATENCY, RPCS
from clusterd.security.audit import AUDITED_METHODS, AuditLog
from clusterd.security.limits import JobQuota, RateLimiter
from clusterd.security.transport import peer_common_name

log = logging.getLogger(__name__)

_CODES: list[tuple[type[ServiceError], grpc.StatusCode]] = [
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (SlurmUnavailable, grpc.StatusCode.UNAVAILABLE),
    (SlurmError, grpc.StatusCode.INTERNAL),
]

# Served to anyone: load balancers and grpcurl need them before they hold a token.
_PUBLIC_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def status_code(exc: ServiceError) -> grpc.StatusCode:
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def _bearer(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key.lower() == "authorization":
            text = value.decode() if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


_JOB_SERVICE = "/clusterctl.v1.JobService/"


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(
        self,
        tokens: TokenStore,
        *,
        cn_users: dict[str, Identity] | None = None,
        limiter: RateLimiter | None = None,
        quota: JobQuota | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self._tokens = tokens
        self._cn_users = cn_users or {}
        self._limiter = limiter
        self._quota = quota
        self._audit = audit

    def _identify(self, context: grpc.aio.ServicerContext) -> tuple[Identity, str]:
        """(identity, how): ``how`` is "token" or "mtls", for the audit log."""
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
                self._wrap_unary(handler.unary_unary, method),
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

    def _admit(self, ident: Identity) -> None:
        if self._limiter is not None:
            self._limiter.check(ident.user)

    def _wrap_unary(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        name = method.rsplit("/", 1)[-1]
        label = _label(method)
        audited = self._audit is not None and method.startswith(_JOB_SERVICE) and name in AUDITED_METHODS
        quota = self._quota if name == "SubmitJob" and method.startswith(_JOB_SERVICE) else None

        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            ident: Identity | None = None
            how = ""
            code = grpc.StatusCode.UNKNOWN
            detail = ""
            response: Any = None
            call = _Call(context, label)
            try:
                ident, how = self._identify(context)
                self._admit(ident)
                if quota is not None:
                    await quota.acquire(ident, request.spec)
                token = set_identity(ident)
                try:
                    response = await behavior(request, context)
                finally:
                    reset_identity(token)
                    if quota is not None:
                        quota.release(ident)
                code = grpc.StatusCode.OK
                return response
            except ServiceError as exc:
                code, detail = status_code(exc), str(exc)
                await _abort(context, method, exc)
            except BaseException as exc:
                code = _code_of(context, exc)
                raise
            finally:
                if audited:
                    self._write_audit(name, request, response, context, ident, how, code, detail, call.request_id)
                call.end(code, ident)

        return wrapper

    def _write_audit(
        self,
        name: str,
        request: Any,
        response: Any,
        context: grpc.aio.ServicerContext,
        ident: Identity | None,
        how: str,
        code: grpc.StatusCode,
        detail: str,
        call_request_id: str,
    ) -> None:
        assert self._audit is not None
        job_id = getattr(request, "job_id", "")
        request_id = ""
        if name == "SubmitJob":
            request_id = request.spec.request_id
            if response is not None:
                job_id = response.job.job_id
        self._audit.record(
            user=ident.user if ident else None,
            admin=ident.admin if ident else False,
            auth=how or None,
            method=name,
            job_id=job_id,
            request_id=request_id,
            result=code.name,
            error=detail,
            peer=context.peer(),
            call_request_id=call_request_id,
        )

    def _wrap_stream(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        label = _label(method)

        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            ident: Identity | None = None
            code = grpc.StatusCode.UNKNOWN
            call = _Call(context, label)
            try:
                ident, _ = self._identify(context)
                self._admit(ident)
                token = set_identity(ident)
                try:
                    async for item in behavior(request, context):
                        yield item
                finally:
                    reset_identity(token)
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
        request_context.unbind(self._tokens)


def _code_of(context: grpc.aio.ServicerContext, exc: BaseException) -> grpc.StatusCode:
    """The status an unexpected exit ends with: a servicer's own abort, a disconnect, or a crash."""
    if isinstance(exc, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    code = context.code() if hasattr(context, "code") else None
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


async def _abort(context: grpc.aio.ServicerContext, method: str, exc: ServiceError) -> None:
    code = status_code(exc)
    log.info("%s -> %s: %s", method, code.name, exc)
    await context.abort(code, str(exc))
