"""The HTTP listeners: /metrics, /healthz, and the dashboard with its /api/ (bearer tokens).

With ``web.listen`` empty the dashboard shares the metrics listener: one port serves /metrics
(unauthenticated, for Prometheus) and the dashboard and /api/. Serving is
:class:`~clusterd.web.listener.HttpListener`'s (aiohttp on clusterd's loop; bounded connections,
deadlines).

Which listeners may carry the dashboard's tokens is clusterd.web.transport's rule.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from clusterd.config import Config, ConfigError
from clusterd.observability.metrics import REGISTRY
from clusterd.security.unixsock import prepare_socket_dir, secure_socket, socket_path
from clusterd.web.app import WebApp
from clusterd.web.listener import BACKLOG, HttpListener, Limits, application
from clusterd.web.transport import check_web_transport, split_host_port, web_listen

__all__ = ["check_web_transport", "combined", "serve", "web_listen"]


def combined(
    dashboard: WebApp | None, health: Callable[[], dict[str, Any]] | None = None, *, metrics: bool = True
) -> web.Application:
    """/metrics for Prometheus (unless not ``metrics``: the dashboard's own listener), /healthz
    (``health()`` as JSON: 200 when it says the replica serves, else 503) for load balancers and the
    stack's scripts, and the ``dashboard`` when given."""
    app = application(dashboard.middlewares if dashboard is not None else ())

    async def exposition(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        response = web.Response(body=encoder(REGISTRY), headers={"Content-Type": content_type})
        response.enable_compression()  # gzip when Prometheus asks for it
        return response

    if metrics:
        app.router.add_get("/metrics", exposition)
    if health is not None:

        async def healthz(request: web.Request) -> web.Response:
            state = health()
            return web.Response(
                status=200 if state.get("role") in ("leader", "follower") else 503,
                body=json.dumps(state, sort_keys=True).encode(),
                content_type="application/json",
                headers={"Cache-Control": "no-store"},
            )

        app.router.add_get("/healthz", healthz)
    if dashboard is not None:
        dashboard.mount(app)
    return app


async def serve(
    listen: str, app: web.Application, *, config: Config | None = None, dashboard: bool = True
) -> HttpListener:
    """Serve ``app`` (see :func:`combined`) on ``host:port`` or ``unix:/PATH`` in the running event
    loop (HTTPS with [tls] when it is a ``dashboard`` and ``config`` enables it and has a certificate),
    bounded by ``config.web``'s limits. A metrics-only listener (``dashboard=False``) stays plain
    HTTP for Prometheus.

    Raises OSError (port taken), ConfigError (bad address, unsafe socket directory, unreadable certificate).
    """
    cfg = config or Config()
    tls = None
    if dashboard and config is not None and config.web.enabled and config.tls.cert_file:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            tls.load_cert_chain(config.tls.cert_file, config.tls.key_file or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"[tls] certificate for the dashboard: {exc}") from exc
    path = socket_path(listen)
    sock, cleanup = _bind_unix(path, cfg.socket_group) if path is not None else (_bind_tcp(listen), None)
    web_cfg = cfg.web
    limits = Limits(
        max_connections=web_cfg.max_connections,
        max_connections_per_client=web_cfg.max_connections_per_client,
        request_timeout_seconds=web_cfg.request_timeout_seconds,
    )
    listener = HttpListener(sock, app, limits=limits, tls=tls, cleanup=cleanup)
    await listener.start()
    return listener


def _bind_tcp(listen: str) -> socket.socket:
    host, port = split_host_port(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot serve HTTP on {listen}: {exc.strerror}") from exc
    return sock


def _bind_unix(path: str, group: str) -> tuple[socket.socket, Callable[[], None]]:
    """A socket in a directory as the gRPC socket's (0750 clusterd:socket_group), itself 0660."""
    plan = prepare_socket_dir(path, group)  # refuses a foreign directory and a live socket
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a stale socket from a crash
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        secure_socket(plan)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot serve HTTP on unix:{path}: {exc.strerror}") from exc

    def unlink() -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    return sock, unlink
