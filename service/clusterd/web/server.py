"""The HTTP listener: wsgiref's threaded server, the one prometheus_client runs /metrics on.

With ``web.listen`` empty the dashboard shares the metrics listener: one port serves /metrics
(unauthenticated, for Prometheus) and the dashboard and /api/ (bearer tokens). Tokens cross this
listener, so it must be loopback, TLS (the gRPC [tls] certificate and key), or allow_insecure:
the same rule clusterd applies to its gRPC port.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from clusterd.config import Config, ConfigError
from clusterd.observability.metrics import REGISTRY, MetricsServer

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(WSGIRequestHandler):
    timeout = 30  # an idle or slow client's connection is closed, its thread freed

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: clusterd logs what matters itself (and /metrics is scraped every few seconds)."""


def web_listen(config: Config) -> str:
    return config.web.listen or config.metrics_listen


def _split(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"web.listen / metrics_listen must be host:port, got {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_web_transport(config: Config) -> None:
    """Refuse to serve bearer tokens in plaintext beyond loopback (ConfigError says what to set)."""
    if not config.web.enabled:
        return
    listen = web_listen(config)
    if not listen:
        raise ConfigError("web.enabled needs web.listen or metrics_listen (host:port)")
    host, _ = _split(listen)
    if not _loopback(host) and not config.tls.cert_file and not config.allow_insecure:
        raise ConfigError(
            f"the dashboard on {listen} would take bearer tokens in plaintext from the network: "
            "listen on loopback, configure [tls] cert_file/key_file (HTTPS), or set allow_insecure"
        )


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
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                    ("Cache-Control", "no-store")])  # fmt: skip
            return [body]
        if path == "/metrics" or web is None:
            return metrics(environ, start_response)
        return web(environ, start_response)

    return app


def serve(listen: str, app: Wsgi, *, config: Config | None = None) -> MetricsServer:
    """Serve ``app`` on ``host:port`` in a daemon thread (HTTPS with [tls] when ``config`` has it).

    Raises OSError (port taken), ConfigError (bad address, unreadable certificate).
    """
    host, port = _split(listen)
    server_class = _Server6 if ":" in host else _Server
    try:
        httpd = make_server(host, port, app, server_class=server_class, handler_class=_Handler)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot serve HTTP on {listen}: {exc.strerror}") from exc
    if config is not None and config.web.enabled and config.tls.cert_file:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(config.tls.cert_file, config.tls.key_file or None)
        except (OSError, ssl.SSLError) as exc:
            httpd.server_close()
            raise ConfigError(f"[tls] certificate for the dashboard: {exc}") from exc
        # The handshake happens in the request's own thread, so a silent client cannot stall accept().
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=httpd.serve_forever, name="clusterd-http", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread)
