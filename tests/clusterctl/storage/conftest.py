"""Fixtures for storage tests: one backend of each kind behind the same Protocol."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterctl.storage import MemoryStorage, PosixOptions, PosixStorage, Storage
from clusterctl.storage.s3 import S3Storage
from tests.support.s3server import S3_SERVERS, get_server

from .helpers import s3_options


@pytest.fixture(params=["memory", "posix", *(pytest.param(f"s3-{n}", marks=pytest.mark.s3) for n in S3_SERVERS)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "memory":
        st: Storage = MemoryStorage()
    elif request.param == "posix":
        st = PosixStorage(str(tmp_path / "root"), PosixOptions(part_size=1 << 20, max_concurrency=3))
    else:
        server = get_server(request.param.removeprefix("s3-"))
        st = S3Storage(server.bucket, f"storage-tests/{uuid.uuid4().hex}", s3_options(server))
    yield st
    st.close()
