"""URI parsing: what is accepted and what is refused with a clear message."""

from __future__ import annotations

import os

import pytest

from clusterctl.storage import InvalidURIError, parse_uri


@pytest.mark.parametrize(
    ("uri", "scheme", "bucket", "prefix"),
    [
        ("s3://bucket", "s3", "bucket", ""),
        ("s3://bucket/", "s3", "bucket", ""),
        ("s3://my-bucket.1/runs/exp-7/", "s3", "my-bucket.1", "runs/exp-7"),
        ("S3://bucket/p", "s3", "bucket", "p"),
        ("file:///data/ckpt", "file", None, "/data/ckpt"),
        ("file://localhost/data/ckpt/", "file", None, "/data/ckpt"),
        ("/abs/dir", "file", None, "/abs/dir"),
    ],
)
def test_accepted(uri: str, scheme: str, bucket: str | None, prefix: str) -> None:
    parsed = parse_uri(uri)
    assert (parsed.scheme, parsed.bucket, parsed.prefix) == (scheme, bucket, prefix)


def test_relative_path_made_absolute() -> None:
    assert parse_uri("ckpts/run1").prefix == os.path.join(os.getcwd(), "ckpts/run1")


@pytest.mark.parametrize(
    ("uri", "needle"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("gs://bucket/x", "unsupported scheme 'gs'"),
        ("http://host/x", "unsupported scheme"),
        ("s3://", "no bucket"),
        ("s3:///prefix", "no bucket"),
        ("s3://Bad_Bucket/x", "not a valid bucket"),
        ("s3://ab/x", "not a valid bucket"),
        ("s3://bucket/../other", "path traversal"),
        ("s3://bucket/a/../../b", "path traversal"),
        ("s3://bucket/a//b", "empty"),
        ("s3://bucket/x?versionId=1", "query"),
        ("s3://bucket/a\\b", "backslash"),
        ("s3://bucket/a\x00b", "control character"),
        ("file://otherhost/data", "must be local"),
        ("file:relative", "malformed"),
        ("file:///data/../etc", "'..'"),
        ("../up/dir", "'..'"),
    ],
)
def test_refused(uri: str, needle: str) -> None:
    with pytest.raises(InvalidURIError) as info:
        parse_uri(uri)
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError)
