"""Fixtures shared by the client's tests: the real S3 servers (a private SeaweedFS per session, the
running Ceph RADOS Gateway), and a fake JobService on a unix socket for the heartbeat and runtime tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.heartbeat import FakeJobService, serve
from tests.support.s3server import S3_SERVERS, S3Server, get_server


@pytest.fixture(scope="session", params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> S3Server:
    """Each real S3 server in turn (tests/conftest.py keeps Ceph's half for the picked S3 tests)."""
    return get_server(request.param)


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "hb.sock"


@pytest.fixture
def fake(sock: Path) -> Iterator[FakeJobService]:
    """A JobService that records the heartbeats sent to ``sock``."""
    service = FakeJobService()
    with serve(sock, service):
        yield service
