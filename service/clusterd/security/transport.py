"""Which transports clusterd accepts: a unix socket, TLS/mTLS on TCP, and TLS to slurmrestd.

Bearer tokens travel in gRPC metadata. On plaintext TCP, loopback included, they are exposed: on
a network anyone on the path reads them, and on one host any local user can bind the port while
clusterd restarts and collect them from reconnecting clients. So a TCP ``listen`` needs [tls];
local clients use the unix socket (see :mod:`clusterd.security.unixsock`). The same holds for the
per-user JWTs clusterd sends to slurmrestd: ``http://`` is accepted for loopback (with a warning)
and unix sockets, refused for any other host. ``allow_insecure = true`` lifts both refusals, a
deliberate and visible choice. Certificates are read once at start; rotating them needs a restart.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import grpc

from clusterd.auth.identity import Identity
from clusterd.config import Config, ConfigError, SlurmConfig, TLSConfig
from clusterd.security.unixsock import socket_path

log = logging.getLogger(__name__)


def listen_host(listen: str) -> str:
    """The host part of a gRPC listen address (``[::1]:50051`` -> ``::1``; ``:50051`` -> ``""``)."""
    if listen.startswith("unix:"):
        return "unix"
    host = listen.rsplit(":", 1)[0] if ":" in listen else listen
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(listen: str) -> bool:
    """True for 127.0.0.0/8, ::1, ``localhost`` and unix sockets; False for wildcards and the rest."""
    host = listen_host(listen)
    if host in ("unix", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def parse_cn_map(text: str) -> dict[str, Identity]:
    """``"cn=user,cn2=user2:admin"`` -> {cn: Identity}. Raises ConfigError on a malformed item."""
    out: dict[str, Identity] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        cn, eq, user = item.partition("=")
        user, _, flag = user.partition(":")
        if not eq or not cn.strip() or not user.strip() or flag not in ("", "admin"):
            raise ConfigError(f"tls.cn_user_map: bad item {item!r} (want CN=user or CN=user:admin)")
        out[cn.strip()] = Identity(user=user.strip(), admin=flag == "admin")
    return out


def check_transport(config: Config) -> None:
    """Refuse configurations that would expose tokens or half-configure TLS (ConfigError says why)."""
    tls = config.tls
    if bool(tls.cert_file) != bool(tls.key_file):
        raise ConfigError("tls.cert_file and tls.key_file must be given together")
    unix = socket_path(config.listen) is not None
    if not tls.cert_file:
        if tls.client_ca_file or tls.cn_user_map:
            raise ConfigError("tls.client_ca_file / tls.cn_user_map need tls.cert_file and tls.key_file")
        if not unix and not config.allow_insecure:
            raise ConfigError(
                f"refusing plaintext gRPC on TCP address {config.listen!r}: bearer tokens would be exposed (on a "
                "network to anyone on the path; on loopback to any local user who binds the port while clusterd "
                'is down). Listen on a unix socket (listen = "unix:/run/clusterd/clusterd.sock"), configure '
                "[tls] cert_file/key_file, or set allow_insecure = true"
            )
        if not unix:
            log.warning("allow_insecure: plaintext gRPC on TCP %s: bearer tokens are exposed", config.listen)
    if tls.cn_user_map and not tls.client_ca_file:
        raise ConfigError("tls.cn_user_map needs tls.client_ca_file (only verified certificates may map to users)")
    parse_cn_map(tls.cn_user_map)
    exposure = restd_exposure(config.slurm)
    if exposure is not None and exposure.remote and not config.allow_insecure:
        raise ConfigError(
            f"refusing {exposure.message}; use https:// (slurm.restd_ca_file) or unix://, or set allow_insecure = true"
        )
    if exposure is not None:
        log.warning("%s%s", "allow_insecure: " if exposure.remote else "", exposure.message)


@dataclass(frozen=True)
class Exposure:
    remote: bool  # True: the network sees the JWTs (refused); False: loopback, local users could (warned)
    message: str


def restd_exposure(slurm: SlurmConfig) -> Exposure | None:
    """How plain ``http://`` to slurmrestd exposes the per-user JWTs; None for https://, unix:// or another backend."""
    if slurm.chosen_backend != "slurmrestd" or not slurm.restd_url.startswith("http://"):
        return None
    host = urlsplit(slurm.restd_url).hostname or ""
    if is_loopback(f"[{host}]:0" if ":" in host else f"{host}:0"):
        return Exposure(
            False,
            f"slurm.restd_url {slurm.restd_url!r} is plain HTTP on loopback: a local user who "
            "binds that port while slurmrestd is down receives users' JWTs; prefer unix:// "
            "or https://",
        )
    return Exposure(
        True, f"slurm.restd_url {slurm.restd_url!r}: plain HTTP to another host sends every user's JWT in clear"
    )


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from exc


def server_credentials(tls: TLSConfig) -> grpc.ServerCredentials | None:
    """Credentials for ``add_secure_port``; None when TLS is off. mTLS is required when a CA is set."""
    if not tls.cert_file:
        return None
    pair = [(_read(tls.key_file, "tls.key_file"), _read(tls.cert_file, "tls.cert_file"))]
    if tls.client_ca_file:
        ca = _read(tls.client_ca_file, "tls.client_ca_file")
        return grpc.ssl_server_credentials(pair, root_certificates=ca, require_client_auth=True)
    return grpc.ssl_server_credentials(pair)


def peer_common_name(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """The verified client certificate's CN (gRPC fills it only after the chain was verified)."""
    names = list(auth_context.get("x509_common_name") or [])
    return names[0].decode("utf-8", "replace") if names else None
