"""Fixtures for checkpoint tests: a temp directory URI, a URI on each real S3 server, fakes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.s3server import S3_SERVERS, S3Server, get_server


def point_at(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """Set the AWS_* variables CheckpointManager reads to ``server``'s."""
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    return server


def fresh_uri(server: S3Server) -> str:
    return f"s3://{server.bucket}/ckpt-tests/{uuid.uuid4().hex}"


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """AWS_* variables pointing at the server (what CheckpointManager reads)."""
    return point_at(s3_server, monkeypatch)


@pytest.fixture
def s3_uri(s3_env: S3Server) -> str:
    return fresh_uri(s3_env)


@pytest.fixture
def posix_uri(tmp_path: Path) -> str:
    return str(tmp_path / "ckpt")


@pytest.fixture(
    params=["posix", *(pytest.param(f"s3-{name}", marks=pytest.mark.s3) for name in S3_SERVERS)],
)
def any_uri(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "posix":
        yield request.getfixturevalue("posix_uri")
    else:
        yield fresh_uri(point_at(get_server(request.param.removeprefix("s3-")), monkeypatch))
