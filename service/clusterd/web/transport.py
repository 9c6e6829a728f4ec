"""Where the dashboard may listen: never where an ordinary local user could have listened first.

Bearer tokens cross the dashboard's listener. A user who binds its address while clusterd is down
(a restart, a crash, an upgrade) collects the token of every browser tab and script that retries.
So the listener must be one no ordinary user can bind: a unix socket in a directory only clusterd
writes (clusterd.security.unixsock), a loopback port below the kernel's ``ip_unprivileged_port_start``
(only root, or CAP_NET_BIND_SERVICE, binds those), or HTTPS with the gRPC [tls] certificate, which
an impostor cannot present to a client that verifies it. Anything else needs allow_insecure.
``clusterd check`` and ``clusterd serve`` apply the rule right after loading the config, so they
refuse the same configs.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from clusterd.config import Config, ConfigError
from clusterd.security.unixsock import socket_path

_PORT_START = "/proc/sys/net/ipv4/ip_unprivileged_port_start"


def web_listen(config: Config) -> str:
    return config.web.listen or config.metrics_listen


def split_host_port(listen: str) -> tuple[str, int]:
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


def unprivileged_port_start() -> int:
    """The lowest port any user may bind in this network namespace (1024 unless lowered, as
    container runtimes often do)."""
    try:
        return int(Path(_PORT_START).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 1024


def check_web_transport(config: Config) -> None:
    """Refuse a dashboard listener another local user could bind (ConfigError says what to set)."""
    if not config.web.enabled:
        return
    listen = web_listen(config)
    if not listen:
        raise ConfigError("web.enabled needs web.listen or metrics_listen (host:port or unix:/PATH)")
    if listen.startswith("unix"):
        socket_path(listen)  # absolute, not abstract; its directory is checked when it is made
        return
    host, port = split_host_port(listen)
    if config.tls.cert_file or config.allow_insecure:
        return
    if not _loopback(host):
        raise ConfigError(
            f"the dashboard on {listen} would take bearer tokens in plaintext from the network: "
            "listen on loopback or a unix socket, configure [tls] cert_file/key_file (HTTPS), or set allow_insecure"
        )
    lowest = unprivileged_port_start()
    if not 0 < port < lowest:
        raise ConfigError(
            f"the dashboard on {listen}: any local user may bind port {port} while clusterd is down and collect "
            f"the bearer tokens sent to it; use a loopback port below {lowest} (only root binds those), "
            'a unix socket (web.listen = "unix:/run/clusterd/web.sock"), or [tls] (HTTPS)'
        )
