"""Fixtures shared by the client's tests: one private SeaweedFS S3 server per session."""

from __future__ import annotations

import pytest

from tests.support.s3server import SeaweedS3, get_server


@pytest.fixture(scope="session")
def s3_server() -> SeaweedS3:
    """Started on first use (only S3-marked parameters ask for it)."""
    return get_server()
