"""Fixtures for checkpoint tests: a temp directory URI, a private SeaweedFS S3 URI, fakes."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from s3server import SeaweedS3, get_server

from clusterctl.checkpoint import CheckpointConfig

# Small parts so that multi-part paths run on small states; short deadlines so faults fail fast.
FAST = dict(part_size=5 << 20, max_concurrency=4, commit_timeout=20.0, poll_initial=0.02, poll_max=0.2,
            connect_timeout=2.0, read_timeout=10.0, max_attempts=2)


def fast_config(**kw: object) -> CheckpointConfig:
    args: dict[str, object] = dict(FAST)
    args.update(kw)
    return CheckpointConfig(**args)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def s3_server() -> SeaweedS3:
    return get_server()


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
