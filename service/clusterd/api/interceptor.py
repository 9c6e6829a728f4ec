"""One interceptor for every RPC, unary and streaming alike: authenticate, then map errors.

It wraps each method handler so that the caller's identity is set in a context variable inside
the handler's own task, and so that a :class:`ServiceError` raised anywhere below becomes exactly
one gRPC status (the table below is the only place that mapping lives).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from clusterd.auth.identity import Identity, reset_identity, set_identity
from clusterd.auth.tokens import TokenStore
from clusterd.errors import (
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

log = logging.getLogger(__name__)

_CODES: list[tuple[type[ServiceError], grpc.StatusCode]] = [
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
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


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tokens: TokenStore) -> None:
        self._tokens = tokens

    def _identify(self, context: grpc.aio.ServicerContext) -> Identity:
        token = _bearer(context.invocation_metadata())
        if token is None:
            raise Unauthenticated("missing 'authorization: Bearer <token>' metadata")
        ident = self._tokens.authenticate(token)
        if ident is None:
            raise Unauthenticated("unknown token")
        return ident

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

    def _wrap_unary(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                token = set_identity(self._identify(context))
                try:
                    return await behavior(request, context)
                finally:
                    reset_identity(token)
            except ServiceError as exc:
                await _abort(context, method, exc)

        return wrapper

    def _wrap_stream(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                token = set_identity(self._identify(context))
                try:
                    async for item in behavior(request, context):
                        yield item
                finally:
                    reset_identity(token)
            except ServiceError as exc:
                await _abort(context, method, exc)

        return wrapper


async def _abort(context: grpc.aio.ServicerContext, method: str, exc: ServiceError) -> None:
    code = status_code(exc)
    log.info("%s -> %s: %s", method, code.name, exc)
    await context.abort(code, str(exc))
