"""S3 specifics: conditional put on the real server, retry classification, deadlines, multipart cleanup."""

from __future__ import annotations

import datetime
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from clusterctl.storage import (
    AccessDeniedError,
    ObjectExistsError,
    ObjectNotFoundError,
    S3Options,
    StorageError,
    StorageUnavailableError,
)
from clusterctl.storage.s3 import S3Storage, is_transient

from .helpers import s3_options


@pytest.mark.s3
def test_server_enforces_if_none_match(s3_server: Any) -> None:
    """The commit protocol relies on this: a second create-only PUT must fail with 412."""
    client = s3_server.client()
    key = f"inm/{uuid.uuid4().hex}"
    client.put_object(Bucket=s3_server.bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=s3_server.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read() == b"first"


@pytest.mark.s3
def test_one_of_concurrent_create_only_puts_wins(s3_server: Any) -> None:
    """Writers racing for one commit marker: exactly one create-only put succeeds, the rest are refused."""
    st = S3Storage(s3_server.bucket, f"race/{uuid.uuid4().hex}", s3_options(s3_server, max_concurrency=8))
    outcomes: list[str] = []

    def attempt(i: int) -> None:
        try:
            st.put("commits/1.json", f"writer {i}".encode(), if_absent=True)
            outcomes.append(f"writer {i}")
        except ObjectExistsError:
            outcomes.append("refused")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(attempt, range(8)))
    [winner] = [o for o in outcomes if o != "refused"]
    assert st.get("commits/1.json") == winner.encode()
    st.close()


@pytest.mark.s3
def test_create_only_put_is_one_request_whatever_its_size(s3_server: Any) -> None:
    """CompleteMultipartUpload may ignore If-None-Match (Ceph RGW does): a create-only object above
    the multipart threshold still goes up as one PutObject, and a second one is refused."""
    st = S3Storage(s3_server.bucket, f"one-put/{uuid.uuid4().hex}", s3_options(s3_server))
    calls: list[str] = []
    st.client.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
    data = b"x" * (6 << 20)  # above the 5 MiB part size
    st.put("big", data, if_absent=True)
    assert calls == ["PutObject"]
    with pytest.raises(ObjectExistsError):
        st.put("big", b"y" * (6 << 20), if_absent=True)
    assert st.stat("big").size == len(data)
    st.close()


@pytest.mark.s3
def test_missing_bucket_is_permanent(s3_server: Any) -> None:
    # A retry would first sleep backoff_initial (20 s): a refusal in well under that was not retried,
    # however slow the loaded machine answers the one request.
    st = S3Storage(
        "no-such-bucket-xyz", "p", s3_options(s3_server, max_attempts=5, backoff_initial=20.0, backoff_max=20.0)
    )
    t0 = time.monotonic()
    with pytest.raises(ObjectNotFoundError, match="bucket does not exist"):
        st.list_objects("")  # (SeaweedFS creates a missing bucket on PUT for admins; LIST is refused)
    assert time.monotonic() - t0 < 15  # not retried
    st.close()


@pytest.mark.s3
def test_bad_credentials_are_permanent(s3_server: Any) -> None:
    st = S3Storage(
        s3_server.bucket,
        "p",
        s3_options(s3_server, secret_access_key="nope", max_attempts=5, backoff_initial=20.0, backoff_max=20.0),
    )
    t0 = time.monotonic()
    with pytest.raises(AccessDeniedError):
        st.list_objects("")
    assert time.monotonic() - t0 < 15  # not retried (see above)
    st.close()


def test_unreachable_endpoint_retries_then_fails_fast() -> None:
    opts = S3Options(
        endpoint_url="http://127.0.0.1:9",
        access_key_id="a",
        secret_access_key="b",
        connect_timeout=0.5,
        read_timeout=0.5,
        max_attempts=3,
        backoff_initial=0.01,
        backoff_max=0.02,
    )
    st = S3Storage("bucket", "p", opts)
    t0 = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="gave up after retries") as info:
        st.get("k")
    assert info.value.retryable and info.value.key == "k"
    assert time.monotonic() - t0 < 10
    st.close()


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"
    )


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (client_error("SlowDown", 503), True),
        (client_error("InternalError", 500), True),
        (client_error("RequestTimeout", 400), True),
        (client_error("Whatever", 502), True),
        (client_error("TooManyRequests", 429), True),
        (EndpointConnectionError(endpoint_url="http://x"), True),
        (client_error("AccessDenied", 403), False),
        (client_error("NoSuchBucket", 404), False),
        (client_error("InvalidArgument", 400), False),
        (client_error("PreconditionFailed", 412), False),
    ],
)
def test_transient_classification(exc: Exception, transient: bool) -> None:
    assert is_transient(exc) is transient


class FlakyClient:
    """put_object fails with SlowDown twice, then succeeds; counts calls."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls = 0

    def put_object(self, **kw: Any) -> dict[str, Any]:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return {}


def test_transient_errors_are_retried() -> None:
    client = FlakyClient([client_error("SlowDown", 503), client_error("InternalError", 500)])
    st = S3Storage("b", "", S3Options(max_attempts=5, backoff_initial=0.001, backoff_max=0.002), client=client)
    st.put("k", b"x")
    assert client.calls == 3
    st.close()


def test_permanent_errors_are_not_retried() -> None:
    client = FlakyClient([client_error("AccessDenied", 403)])
    st = S3Storage("b", "", S3Options(max_attempts=5, backoff_initial=0.001), client=client)
    with pytest.raises(AccessDeniedError):
        st.put("k", b"x")
    assert client.calls == 1
    client = FlakyClient([client_error("PreconditionFailed", 412)])
    st = S3Storage("b", "", S3Options(max_attempts=5, backoff_initial=0.001), client=client)
    with pytest.raises(ObjectExistsError):
        st.put("k", b"x", if_absent=True)
    st.close()


@pytest.mark.s3
def test_failed_multipart_upload_is_aborted(s3_server: Any) -> None:
    """A part that fails for good aborts the upload where it was born (no orphan left)."""
    st = S3Storage(s3_server.bucket, f"mp/{uuid.uuid4().hex}", s3_options(s3_server, max_attempts=1))
    calls = [0]

    def boom(**kw: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise client_error("InvalidArgument", 400)

    st.client.meta.events.register("before-call.s3.UploadPart", boom)
    with pytest.raises(Exception, match="InvalidArgument"):
        st.put("big", b"x" * (12 << 20))
    st.client.meta.events.unregister("before-call.s3.UploadPart", boom)
    assert st.list_incomplete("") == []
    with pytest.raises(ObjectNotFoundError):
        st.stat("big")
    st.close()


@pytest.mark.s3
def test_list_and_abort_orphaned_uploads(s3_server: Any) -> None:
    prefix = f"orphans/{uuid.uuid4().hex}"
    st = S3Storage(s3_server.bucket, prefix, s3_options(s3_server))
    st.client.create_multipart_upload(Bucket=s3_server.bucket, Key=f"{prefix}/steps/x")
    [upload] = st.list_incomplete("steps/")
    assert upload.key == "steps/x" and upload.started > time.time() - 600
    st.abort_incomplete(upload)
    assert st.list_incomplete("steps/") == []
    st.close()


class PagedClient:
    """ListObjectsV2 in pages of two keys (what S3 does past 1,000), optionally repeating a token."""

    def __init__(self, keys: list[str], *, stuck: bool = False) -> None:
        self.keys = keys
        self.stuck = stuck
        self.calls: list[dict[str, Any]] = []

    def list_objects_v2(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(kw)
        start = 0 if self.stuck else int(kw.get("ContinuationToken", "0"))
        page = self.keys[start : start + 2]
        when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        out: dict[str, Any] = {"Contents": [{"Key": k, "Size": 1, "LastModified": when} for k in page]}
        if start + 2 < len(self.keys):
            out.update(IsTruncated=True, NextContinuationToken=str(start + 2))
        return out


def test_listing_follows_continuation_tokens() -> None:
    keys = [f"p/commits/{i:03d}.json" for i in range(5)]
    client = PagedClient(keys)
    st = S3Storage("b", "p", client=client)
    assert [o.key for o in st.list_objects("commits/")] == [k[2:] for k in keys]
    assert [c.get("ContinuationToken") for c in client.calls] == [None, "2", "4"]
    with pytest.raises(StorageError, match="repeated its continuation token"):
        S3Storage("b", "p", client=PagedClient(keys, stuck=True)).list_objects("commits/")
    st.close()
