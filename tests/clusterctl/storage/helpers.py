"""Shared settings for storage tests."""

from __future__ import annotations

from clusterctl.storage import S3Options
from tests.support.s3server import S3Server


def s3_options(server: S3Server, **kw: object) -> S3Options:
    base: dict[str, object] = dict(
        endpoint_url=server.endpoint,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        region=server.region,
        part_size=5 << 20,
        max_concurrency=4,
        connect_timeout=2,
        read_timeout=10,
        max_attempts=3,
        backoff_initial=0.05,
        backoff_max=0.5,
    )
    base.update(kw)
    return S3Options(**base)  # type: ignore[arg-type]
