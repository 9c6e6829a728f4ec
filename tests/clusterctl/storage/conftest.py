"""Fixtures for storage tests: one backend of each kind behind the same Protocol."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterctl.storage import MemoryStorage, PosixOptions, PosixStorage, Storage
from clusterctl.storage.s3 import S3Storage

from .helpers import s3_options


@pytest.fixture(params=["memory", "posix", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "memory":
        st: Storage = MemoryStorage()
    elif request.param == "posix":
        st = PosixStorage(str(tmp_path / "root"), PosixOptions(part_size=1 << 20, max_concurrency=3))
    else:
        server = request.getfixturevalue("s3_server")
        st = S3Storage(server.bucket, f"storage-tests/{uuid.uuid4().hex}", s3_options(server))
    yield st
    st.close()
