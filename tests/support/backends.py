"""Slurm backends built against a running stack, and the job helpers the backend suites share.

``tests/contract`` (every backend, one API version each) and ``tests/compat`` (every Slurm release,
the commands backend and slurmrestd at every API version the release serves) both build backends
here, exactly as clusterd would from a SlurmConfig pointed at the stack.
"""

from __future__ import annotations

import asyncio
import json as _json
import pwd
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.request import JobRequest
from clusterd.slurm.restd import RestdBackend
from clusterd.slurm.restd_http import Reply
from clusterd.slurm.types import JobPoll, SlurmJob

from .ports import free_port
from .stack import Stack, missing

SLEEP_SCRIPT = "#!/bin/bash\nsleep 300\n"
PYSLURM_RELEASE = "25.11"  # the only Slurm release PyPI's pyslurm builds against
RESTD_KEY = b"k" * 32  # restd_backend's JWT key


@dataclass(frozen=True)
class JobUser:
    name: str
    uid: int
    gid: int
    home: str
    job_dir: Path


def job_user(stack: Stack, name: str = "alice") -> JobUser:
    """``name`` as a job's owner: Unix ids, home, and the stack's job directory for them."""
    entry = pwd.getpwnam(name)
    return JobUser(name, entry.pw_uid, entry.pw_gid, entry.pw_dir, stack.dir / "jobs" / name)


def unreachable_slurm_conf(stack: Stack, tmp: Path) -> str:
    """A copy of the stack's Slurm config whose controller port nobody listens on."""
    src = Path(stack.slurm_conf).parent
    for name in ("topology.conf", "gres.conf", "cgroup.conf"):
        if (src / name).exists():
            shutil.copy(src / name, tmp / name)
    port = free_port()
    lines = [
        f"SlurmctldPort={port}" if ln.startswith("SlurmctldPort=") else ln
        for ln in Path(stack.slurm_conf).read_text().splitlines()
    ]
    (tmp / "slurm.conf").write_text("\n".join(lines) + "\nMessageTimeout=2\n")
    return str(tmp / "slurm.conf")


def restd_config(stack: Stack, *, api_version: str = "", url: str = "") -> SlurmConfig:
    """The slurmrestd backend's settings for the stack (``api_version`` "" = newest both sides know)."""
    rest_url, key = stack.env.get("CLUSTERCTL_RESTD_URL"), stack.env.get("CLUSTERCTL_JWT_KEY")
    if not rest_url or not key:
        missing("the stack's env file has no CLUSTERCTL_RESTD_URL/CLUSTERCTL_JWT_KEY (stack predates slurmrestd)")
    return SlurmConfig(
        restd_url=url or str(rest_url),
        jwt_key_file=str(key),
        slurm_conf=stack.slurm_conf,
        bin_dir=stack.slurm_bin,
        restd_api_version=api_version,
        command_timeout_seconds=30,
    )


def make_backend(name: str, stack: Stack, *, unreachable: Path | None = None, api_version: str = "") -> Any:
    """``name``'s backend for the stack; with ``unreachable`` (a temp dir), one that cannot reach it."""
    if name == "commands":
        from clusterd.slurm.commands import CommandsBackend

        conf = unreachable_slurm_conf(stack, unreachable) if unreachable else stack.slurm_conf
        return CommandsBackend(SlurmConfig(slurm_conf=conf, bin_dir=stack.slurm_bin, command_timeout_seconds=30))
    if name == "slurmrestd":
        url = f"http://127.0.0.1:{free_port()}" if unreachable else ""
        return RestdBackend(restd_config(stack, api_version=api_version, url=url))
    if name == "pyslurm":
        if stack.slurm_version != PYSLURM_RELEASE:
            pytest.skip(
                f"pyslurm is untested on this machine kind: PyPI's pyslurm builds only against Slurm "
                f"{PYSLURM_RELEASE}, which no reachable package source carries; this stack runs "
                f"{stack.slurm_version}"
            )
        try:
            from clusterd.slurm import pyslurm_backend
        except ImportError as exc:
            pytest.skip(f"clusterd.slurm.pyslurm_backend is not importable: {exc}")
        reason = pyslurm_backend.unavailable_reason()
        if reason is not None:
            pytest.skip(reason)
        if unreachable:
            pytest.skip("no unreachable-endpoint setting for pyslurm (libslurm reads the host's slurm.conf)")
        return pyslurm_backend.PyslurmBackend(SlurmConfig(slurm_conf=stack.slurm_conf))
    raise AssertionError(name)


async def close_backend(backend: Any) -> None:
    close = getattr(backend, "aclose", None)
    if close is not None:
        await close()


def tag(prefix: str = "contract") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def submit_args(user: JobUser, script: str = SLEEP_SCRIPT, **fields: object) -> JobRequest:
    """What JobManager hands a backend: the job's user, its directories, the validated fields."""
    defaults: dict[str, object] = {
        "name": tag(),
        "time_limit_seconds": 600,
        "stdout": "contract-%j.out",
        "working_directory": str(user.job_dir),
        "submit_directory": str(user.job_dir),
    }
    return JobRequest(script=script, user=user.name, **{**defaults, **fields})  # type: ignore[arg-type]


async def find_job(backend: SlurmBackend, job_id: str) -> SlurmJob | None:
    return next((j for j in await backend.list_jobs() if j.job_id == job_id), None)


async def wait_job(
    backend: SlurmBackend, job_id: str, ok: Callable[[SlurmJob], bool], what: str, timeout: float = 90.0
) -> SlurmJob:
    deadline = time.monotonic() + timeout
    job = None
    while time.monotonic() < deadline:
        job = await find_job(backend, job_id)
        if job is not None and ok(job):
            return job
        await asyncio.sleep(0.5)
    raise AssertionError(f"job {job_id}: timed out waiting for {what}; last seen {job}")


# ---------------------------------------------------------------- slurmrestd without a server
@dataclass(frozen=True)
class Sent:
    """One request the slurmrestd backend sent (``content``: the JSON body's bytes, or b"")."""

    method: str
    path: str
    headers: dict[str, str]
    content: bytes


def answer(status: int = 200, *, json: Any = None, text: str = "") -> Reply:
    """slurmrestd's answer: a JSON document, or plain text."""
    body = _json.dumps(json).encode() if json is not None else text.encode()
    return Reply(status, "OK" if status < 400 else "Error", body)


class FakeRestdHttp:
    """:class:`clusterd.slurm.restd_http.RestdHttp` answered by ``handler(Sent) -> Reply`` (which may
    raise HttpFailure): the backend's logic tested without a slurmrestd; the HTTP client itself
    is tested over real sockets (tests/clusterd/slurm/test_restd_http.py)."""

    def __init__(self, handler: Callable[[Sent], Reply]) -> None:
        self._handler = handler

    async def request(self, method: str, path: str, *, headers: dict[str, str], body: Any = None) -> Reply:
        content = _json.dumps(body).encode() if body is not None else b""
        return self._handler(Sent(method, path, dict(headers), content))

    async def aclose(self) -> None:
        pass


class SqueueFallback:
    """The commands backend as the slurmrestd backend falls back to for a big queue: filtered squeues
    where ``filters`` (listing ``listed``), the queue's job-state lines (``queue``; an error while
    ``queue_fails``), holds; every call counted."""

    def __init__(self, filters: bool = True) -> None:
        self.filters = filters
        self.polls = 0
        self.holds: list[str] = []
        self.queue = "7 RUNNING\n1 PENDING\n"  # squeue --only-job-state's lines
        self.queue_reads = 0
        self.queue_fails = False
        self.listed: tuple[SlurmJob, ...] = ()  # what a filtered look lists

    async def filters_queue(self) -> bool:
        return self.filters

    async def queue_states(self) -> str:
        self.queue_reads += 1
        if self.queue_fails:
            raise SlurmError("squeue", 1, "squeue: error: slurm_load_job_state: timed out")
        return self.queue

    async def poll_jobs(self, focus: frozenset[str]) -> JobPoll:
        self.polls += 1
        return JobPoll(self.listed, whole=False)

    async def hold(self, job_id: str, *, user: str) -> None:
        self.holds.append(job_id)


def restd_backend(
    tmp_path: Path, handler: Callable[[Sent], Reply], *, fallback: Any = None, **cfg: Any
) -> RestdBackend:
    """A RestdBackend signing with a throwaway key (``RESTD_KEY``) whose HTTP is ``handler``."""
    key = tmp_path / "jwt.key"
    key.write_bytes(RESTD_KEY)
    config = SlurmConfig(restd_url="http://restd.invalid:6820", jwt_key_file=str(key), **cfg)
    return RestdBackend(config, client=FakeRestdHttp(handler), fallback=fallback)
