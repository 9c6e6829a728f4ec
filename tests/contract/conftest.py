"""One suite, every Slurm backend, the real local stack (deploy/local/stack.sh up).

Backends are built from a SlurmConfig pointed at the stack, exactly as clusterd would build them.
Without a stack these tests skip, unless CLUSTERCTL_REQUIRE_STACK=1 (then a missing stack, or a
stack without slurmrestd, fails: a skipped contract test proves nothing). The pyslurm backend skips
with its own reason when no importable pyslurm matches the running Slurm.
"""

from __future__ import annotations

import pwd
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clusterd.config import SlurmConfig
from clusterd.slurm.base import SlurmBackend
from tests.support.ports import free_port
from tests.support.stack import Stack, missing

BACKENDS = ("commands", "slurmrestd", "pyslurm")


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


def make_backend(name: str, stack: Stack, *, unreachable: Path | None = None) -> Any:
    """``name``'s backend for the stack; with ``unreachable`` (a temp dir), one that cannot reach it."""
    if name == "commands":
        from clusterd.slurm.commands import CommandsBackend

        conf = unreachable_slurm_conf(stack, unreachable) if unreachable else stack.slurm_conf
        return CommandsBackend(SlurmConfig(slurm_conf=conf, bin_dir=stack.slurm_bin, command_timeout_seconds=30))
    if name == "slurmrestd":
        from clusterd.slurm.restd import RestdBackend

        url, key = stack.env.get("CLUSTERCTL_RESTD_URL"), stack.env.get("CLUSTERCTL_JWT_KEY")
        if not url or not key:
            missing("the stack's env file has no CLUSTERCTL_RESTD_URL/CLUSTERCTL_JWT_KEY (stack predates slurmrestd)")
        if unreachable:
            url = f"http://127.0.0.1:{free_port()}"
        cfg = SlurmConfig(restd_url=str(url), jwt_key_file=str(key), slurm_conf=stack.slurm_conf,
                          bin_dir=stack.slurm_bin, command_timeout_seconds=30)  # fmt: skip
        return RestdBackend(cfg)
    if name == "pyslurm":
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


async def _close(backend: Any) -> None:
    close = getattr(backend, "aclose", None)
    if close is not None:
        await close()


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, stack: Stack) -> AsyncIterator[SlurmBackend]:
    b = make_backend(request.param, stack)
    yield b
    await _close(b)


@pytest.fixture(params=BACKENDS)
async def unreachable_backend(
    request: pytest.FixtureRequest, stack: Stack, tmp_path: Path
) -> AsyncIterator[SlurmBackend]:
    b = make_backend(request.param, stack, unreachable=tmp_path)
    yield b
    await _close(b)


@dataclass(frozen=True)
class JobUser:
    name: str
    uid: int
    gid: int
    home: str
    job_dir: Path


@pytest.fixture(scope="session")
def alice(stack: Stack) -> JobUser:
    entry = pwd.getpwnam("alice")
    return JobUser("alice", entry.pw_uid, entry.pw_gid, entry.pw_dir, stack.dir / "jobs" / "alice")
