"""The job's heartbeat credential: a random token in the job's environment, its digest in the record.

Only the job (its owner's processes) holds the token; the store keeps its SHA-256, so a copy of
the database cannot beat for a job. The token names nothing but its record: a leaked token lets
its holder report liveness for that one job, and nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Protocol

from clusterd.config import LivenessConfig
from clusterd.security.unixsock import socket_path


class _Timing(Protocol):
    @property
    def heartbeat_interval_seconds(self) -> float | None: ...
    @property
    def hang_timeout_seconds(self) -> float | None: ...


class JobTiming(Protocol):
    """What liveness reads of a job's spec: its restart policy's heartbeat interval and hang timeout
    (None or 0: the service's defaults). The record's spec has this shape; liveness needs nothing else of it."""

    @property
    def restart_policy(self) -> _Timing: ...


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def matches(token: str, sha256: str) -> bool:
    return bool(sha256) and hmac.compare_digest(digest(token), sha256)


def heartbeat_addr(config: LivenessConfig, listen: str) -> str:
    """Where jobs send heartbeats: configured, else the service's own unix socket, else nowhere."""
    if not config.enabled:
        return ""
    if config.heartbeat_addr:
        return config.heartbeat_addr
    return listen if socket_path(listen) is not None else ""


def interval_of(spec: JobTiming, config: LivenessConfig) -> float:
    seconds = spec.restart_policy.heartbeat_interval_seconds or 0.0
    return seconds if seconds > 0 else config.heartbeat_interval_seconds


def hang_timeout_of(spec: JobTiming, config: LivenessConfig) -> float:
    seconds = spec.restart_policy.hang_timeout_seconds or 0.0
    return seconds if seconds > 0 else config.hang_timeout_seconds


def issue(spec: JobTiming, config: LivenessConfig, listen: str) -> tuple[dict[str, str], str]:
    """(the job's CLUSTERCTL_HEARTBEAT_* variables, the token's digest); ({}, "") when heartbeats are off."""
    addr = heartbeat_addr(config, listen)
    if not addr:
        return {}, ""
    token = secrets.token_urlsafe(32)
    env = {
        "CLUSTERCTL_HEARTBEAT_ADDR": addr,
        "CLUSTERCTL_HEARTBEAT_TOKEN": token,
        "CLUSTERCTL_HEARTBEAT_INTERVAL": f"{interval_of(spec, config):g}",
    }
    if config.heartbeat_ca_file:
        env["CLUSTERCTL_CA"] = config.heartbeat_ca_file  # the client library's TLS root for TCP addresses
    return env, digest(token)


def tcp_addresses(config: LivenessConfig, listen: str) -> list[str]:
    """The heartbeat addresses jobs dial over TCP (not unix sockets): their beats carry the token."""
    return [a for a in heartbeat_addr(config, listen).split(",") if a.strip() and socket_path(a.strip()) is None]
