"""One suite, every Slurm backend, the real local stack (deploy/local/stack.sh up).

Backends are built from a SlurmConfig pointed at the stack, exactly as clusterd would build them.
Without a stack these tests skip, unless CLUSTERCTL_REQUIRE_STACK=1 (then a missing stack, or a
stack without slurmrestd, fails: a skipped contract test proves nothing). The pyslurm backend skips
with its own reason when no importable pyslurm matches the running Slurm.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clusterd.slurm.base import SlurmBackend
from tests.support.backends import JobUser, close_backend, job_user, make_backend
from tests.support.stack import Stack

BACKENDS = ("commands", "slurmrestd", "pyslurm")


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, stack: Stack) -> AsyncIterator[SlurmBackend]:
    b = make_backend(request.param, stack)
    yield b
    await close_backend(b)


@pytest.fixture(params=BACKENDS)
async def unreachable_backend(
    request: pytest.FixtureRequest, stack: Stack, tmp_path: Path
) -> AsyncIterator[SlurmBackend]:
    b = make_backend(request.param, stack, unreachable=tmp_path)
    yield b
    await close_backend(b)


@pytest.fixture(scope="session")
def alice(stack: Stack) -> JobUser:
    return job_user(stack, "alice")
