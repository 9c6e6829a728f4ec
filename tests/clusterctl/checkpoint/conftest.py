"""Fixtures for checkpoint tests: a temp directory URI, a private SeaweedFS S3 URI, fakes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.s3server import SeaweedS3


@pytest.fixture
def s3_env(s3_server: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> SeaweedS3:
    """AWS_* variables pointing at the private server (what CheckpointManager reads)."""
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    return s3_server


@pytest.fixture
def s3_uri(s3_env: SeaweedS3) -> str:
    return f"s3://{s3_env.bucket}/ckpt-tests/{uuid.uuid4().hex}"


@pytest.fixture
def posix_uri(tmp_path: Path) -> str:
    return str(tmp_path / "ckpt")


@pytest.fixture(params=["posix", pytest.param("s3", marks=pytest.mark.s3)])
def any_uri(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.getfixturevalue("posix_uri" if request.param == "posix" else "s3_uri")
