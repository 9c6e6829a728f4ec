"""The HTTP listeners: /metrics, /healthz, and the dashboard with its /api/ (bearer tokens).

With ``web.listen`` empty the dashboard shares the metrics listener: one port serves /metrics
(unauthenticated, for Prometheus) and the dashboard and /api/. Serving is
:class:`~clusterd.web.listener.HttpListener`'s (bounded connections, deadlines, its own thread).

Which listeners may carry the dashboard's tokens is clusterd.web.transport's rule.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import make_wsgi_app

from clusterd.config import Config, ConfigError
from clusterd.observability.metrics import REGISTRY
from clusterd.security.unixsock import prepare_socket_dir, secure_socket, socket_path
from clusterd.web.listener import BACKLOG, HttpListener, Limits
from clusterd.web.transport import check_web_transport, split_host_port, web_listen

__all__ = ["check_web_transport", "combined", "serve", "web_listen"]

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def combined(web: Wsgi | None, health: Callable[[], dict[str, Any]] | None = None) -> Wsgi:
    """/metrics for Prometheus, /healthz (``health()`` as JSON: 200 when it says the replica serves,
    else 503) for load balancers and the stack's scripts; everything else to the dashboard."""
    metrics = make_wsgi_app(REGISTRY)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz" and health is not None:
            state = health()
            body = json.dumps(state, sort_keys=True).encode()
            status = "200 OK" if state.get("role") in ("leader", "follower") else "503 Service Unavailable"
            start_response(
                status,
                [
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(body))),
                    ("Cache-Control", "no-store"),
                ],
            )
            return [body]
        if path == "/metrics" or web is None:
            return metrics(environ, start_response)
        return web(environ, start_response)

    return app


def serve(listen: str, app: Wsgi, *, config: Config | None = None, dashboard: bool = True) -> HttpListener:
    """Serve ``app`` on ``host:port`` or ``unix:/PATH`` (HTTPS with [tls] when it is a ``dashboard``
    and ``config`` enables it and has a certificate), bounded by ``config.web``'s limits, in a thread
    of its own. A metrics-only listener (``dashboard=False``) stays plain HTTP for Prometheus.

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
    web = cfg.web
    limits = Limits(
        max_connections=web.max_connections,
        max_connections_per_client=web.max_connections_per_client,
        request_timeout_seconds=web.request_timeout_seconds,
        workers=web.max_concurrent + 4,
    )
    return HttpListener(sock, app, limits=limits, tls=tls, cleanup=cleanup)


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
