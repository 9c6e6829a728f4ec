"""Fixtures shared by the client's tests: one private SeaweedFS S3 server per session, and a fake
JobService on a unix socket for the heartbeat and runtime tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.heartbeat import FakeJobService, serve
from tests.support.s3server import SeaweedS3, get_server


@pytest.fixture(scope="session")
def s3_server() -> SeaweedS3:
    """Started on first use (only S3-marked parameters ask for it)."""
    return get_server()


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "hb.sock"


@pytest.fixture
def fake(sock: Path) -> Iterator[FakeJobService]:
    """A JobService that records the heartbeats sent to ``sock``."""
    service = FakeJobService()
    with serve(sock, service):
        yield service
