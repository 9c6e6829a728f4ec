"""The compatibility suite: each Slurm release the stack can run (22.05 from the host's packages,
24.11 and 26.05 from debootstrap chroots: ``deploy/local/stack.sh up --slurm VER``), through the
commands backend and through slurmrestd at every REST API version that release serves.

The stack under test is the one ``CLUSTERCTL_STACK_DIR`` names (default: the 22.05 stack), e.g.
``CLUSTERCTL_STACK_DIR=/var/lib/clusterctl-stack-26.05 pytest -m compat``. A variant for an API
version the running slurmrestd does not serve is skipped with the versions it does serve.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.restd import RestdBackend
from clusterd.slurm.restd_versions import KNOWN_API_VERSIONS
from tests.support.backends import JobUser, close_backend, job_user, make_backend, restd_config
from tests.support.daemon import Daemon
from tests.support.stack import Stack

# "commands", then one slurmrestd variant per API version clusterd speaks.
VARIANTS = ("commands", *(f"slurmrestd-{v}" for v in KNOWN_API_VERSIONS))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.compat)
            item.add_marker(pytest.mark.slurm)


@pytest.fixture(scope="session")
def offered_api_versions(stack: Stack) -> frozenset[str]:
    """The REST API versions the stack's slurmrestd serves (``GET /openapi/v3``)."""

    async def ask() -> set[str]:
        backend = RestdBackend(restd_config(stack))
        try:
            return await backend.offered_versions()
        finally:
            await backend.aclose()

    return frozenset(asyncio.run(ask()))


def api_of(variant: str, stack: Stack, offered: frozenset[str]) -> str | None:
    """The REST version a variant names (None for commands); skips one this release does not serve."""
    if variant == "commands":
        return None
    api = variant.removeprefix("slurmrestd-")
    if api not in offered:
        pytest.skip(f"Slurm {stack.slurm_version}'s slurmrestd serves {', '.join(sorted(offered))}, not {api}")
    return api


@pytest.fixture(params=VARIANTS)
async def compat_backend(
    request: pytest.FixtureRequest, stack: Stack, offered_api_versions: frozenset[str]
) -> AsyncIterator[SlurmBackend]:
    api = api_of(request.param, stack, offered_api_versions)
    backend = make_backend("commands" if api is None else "slurmrestd", stack, api_version=api or "")
    yield backend
    await close_backend(backend)


@pytest.fixture(scope="module", params=VARIANTS)
def compat_daemon(
    request: pytest.FixtureRequest,
    stack: Stack,
    offered_api_versions: frozenset[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Daemon]:
    """clusterd in front of the stack, on the commands backend or on slurmrestd at one API version."""
    api = api_of(request.param, stack, offered_api_versions)
    extra = {"CLUSTERD_SLURM__BACKEND": "commands"}
    if api is not None:
        cfg = restd_config(stack, api_version=api)
        extra = {
            "CLUSTERD_SLURM__BACKEND": "slurmrestd",
            "CLUSTERD_SLURM__RESTD_URL": cfg.restd_url,
            "CLUSTERD_SLURM__JWT_KEY_FILE": cfg.jwt_key_file,
            "CLUSTERD_SLURM__RESTD_API_VERSION": api,
        }
    d = Daemon.reachable_by_jobs(stack, tmp_path_factory.mktemp("clusterd-compat"), extra_env=extra)
    d.start()
    yield d
    d.stop()
    assert d.socket_dir is not None
    shutil.rmtree(d.socket_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def alice(stack: Stack) -> JobUser:
    return job_user(stack, "alice")
