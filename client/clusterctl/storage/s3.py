"""S3 backend (AWS, MinIO, SeaweedFS, Ceph) on botocore low-level calls.

Why low-level calls rather than ``upload_fileobj``: the checkpoint layer already holds the shard
in one staging buffer and has checksummed exactly those bytes; parts are sent straight from
slices of that buffer (no copies, memory stays bounded by the staging pool) through a bounded
thread pool, and a failed multipart upload is aborted where it was born.

Every call has a deadline (botocore connect/read timeouts). botocore's own retries are off and
tenacity retries transient failures (connection errors, timeouts, 5xx, throttling) with
exponential backoff and jitter; permanent errors (access denied, missing bucket, other 4xx)
fail at once. Addressing is path-style so custom endpoints work without DNS tricks.
"""

from __future__ import annotations

import io
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

from .base import Buffer, IncompleteUpload, ObjectInfo, validate_key
from .errors import (
    AccessDeniedError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)
from .s3options import S3Options
from .threads import nice_initializer, read_part_size, run_all

log = logging.getLogger(__name__)
T = TypeVar("T")

_TRANSIENT_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "InternalError",
    "ServiceUnavailable",
    "503",
    "500",
    "502",
    "504",
    "TooManyRequests",
    "OperationAborted",
}
_NOT_FOUND_CODES = {"NoSuchKey", "NotFound", "404", "NoSuchUpload"}
_DENIED_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "AllAccessDisabled"}
_EXISTS_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict"}
_MAX_SINGLE_PUT = 5 << 30  # S3's limit on one PutObject


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: connection problems, timeouts, 5xx, throttling."""
    if isinstance(exc, ClientError):
        status = _status(exc)
        return _error_code(exc) in _TRANSIENT_CODES or status >= 500 or status == 429
    return isinstance(
        exc,
        EndpointConnectionError
        | ConnectionClosedError
        | ReadTimeoutError
        | ConnectTimeoutError
        | HTTPClientError
        | ResponseStreamingError
        | ConnectionError
        | TimeoutError,
    )


def map_error(exc: BaseException, what: str, key: str | None) -> StorageError:
    """Translate a boto/botocore exception into the storage error hierarchy."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, ClientError):
        code, status = _error_code(exc), _status(exc)
        msg = exc.response.get("Error", {}).get("Message", "") or str(exc)
        if code == "NoSuchBucket":
            return ObjectNotFoundError(f"{what}: bucket does not exist ({msg})", key=key)
        if code in _NOT_FOUND_CODES:
            return ObjectNotFoundError(f"{what}: not found", key=key)
        if code in _DENIED_CODES:
            return AccessDeniedError(f"{what}: access denied ({code}: {msg})", key=key)
        if code in _EXISTS_CODES or status == 412:
            return ObjectExistsError(f"{what}: already exists (precondition failed)", key=key)
        if is_transient(exc):
            return StorageUnavailableError(
                f"{what}: {code or status} {msg} (gave up after retries)", key=key, retryable=True
            )
        return StorageError(f"{what}: {code or status} {msg}", key=key)
    if is_transient(exc):
        return StorageUnavailableError(f"{what}: {exc} (gave up after retries)", key=key, retryable=True)
    return StorageError(f"{what}: {type(exc).__name__}: {exc}", key=key)


class _ViewReader(io.RawIOBase):
    """A seekable, read-only file over a memoryview, so a part is sent without copying it."""

    def __init__(self, view: memoryview) -> None:
        super().__init__()
        self._view = view
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), len(self._view) - self._pos)
        if n <= 0:
            return 0
        memoryview(b).cast("B")[:n] = self._view[self._pos : self._pos + n]
        self._pos += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        end = len(self._view) if size is None or size < 0 else min(len(self._view), self._pos + size)
        out = self._view[self._pos : end].tobytes()
        self._pos = end
        return out

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, min(len(self._view), base + offset))
        return self._pos

    def tell(self) -> int:
        return self._pos

    def __len__(self) -> int:
        return len(self._view)


def _read_body_into(resp: dict[str, Any], view: memoryview) -> int:
    """Read a GET response body into ``view``; returns the number of bytes read.

    Fast path: ``readinto`` on the underlying ``http.client`` response, straight from the socket
    into the caller's buffer (about 1.5-3x faster than botocore's ``StreamingBody.readinto``,
    which copies through urllib3). Only for identity-encoded bodies; the caller checks the
    length and the checkpoint layer checks every byte against its xxh3 digests.
    """
    body: Any = resp["Body"]
    raw: Any = getattr(body, "_raw_stream", None)
    fp: Any = getattr(raw, "_fp", None)
    fast = resp.get("ContentEncoding") in (None, "", "identity") and hasattr(fp, "readinto")
    reader: Any = fp if fast else body
    got = 0
    try:
        while got < len(view):
            n = reader.readinto(view[got:])
            if not n:
                break
            got += n
    finally:
        if fast and got == len(view) and hasattr(raw, "release_conn"):
            raw.release_conn()
        else:
            body.close()
    return got


def new_client(opts: S3Options) -> Any:
    """A botocore S3 client for ``opts`` (botocore directly: boto3 adds ~40 ms of imports and nothing used here)."""
    endpoint = opts.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = Config(
        s3={"addressing_style": "path"},
        connect_timeout=opts.connect_timeout,
        read_timeout=opts.read_timeout,
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=opts.max_concurrency + 4,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return botocore.session.Session().create_client(
        "s3",
        region_name=opts.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        endpoint_url=endpoint or None,
        aws_access_key_id=opts.access_key_id,
        aws_secret_access_key=opts.secret_access_key,
        aws_session_token=opts.session_token,
        config=config,
    )


class S3Storage:
    """Objects under ``s3://bucket/prefix``."""

    def __init__(
        self, bucket: str, prefix: str = "", options: S3Options | None = None, *, client: Any | None = None
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        validate_key(self.prefix, allow_empty=True, what="prefix")
        self.options = opts = options or S3Options()
        if opts.part_size < 5 << 20:
            raise ValueError(f"part_size {opts.part_size} is below the S3 minimum of 5 MiB")
        self._threshold = opts.multipart_threshold or opts.part_size
        # Any: the calls below pass optional headers as **kwargs, which the typed stubs cannot follow.
        self._client: Any = client
        self._client_error: BaseException | None = None
        self._client_ready = threading.Event()
        if client is None:  # ~60 ms of botocore set-up, overlapped with whatever the caller does next
            threading.Thread(target=self._make_client, name="s3-client", daemon=True).start()
        else:
            self._client_ready.set()
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, opts.max_concurrency),
            thread_name_prefix="s3-io",
            initializer=nice_initializer(opts.thread_nice),
        )

    def _make_client(self) -> None:
        try:
            self._client = new_client(self.options)
        except BaseException as exc:
            self._client_error = exc
        finally:
            self._client_ready.set()

    @property
    def client(self) -> Any:
        """The botocore S3 client (made in a background thread; the first use waits for it).

        Raises:
            Whatever botocore raised while making it (a malformed endpoint URL, partial credentials).
        """
        if self._client is None:
            self._client_ready.wait()
            if self._client_error is not None:
                raise self._client_error
        return self._client

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def _full(self, key: str, *, allow_empty: bool = False) -> str:
        validate_key(key, allow_empty=allow_empty)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _rel(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    def _call(self, what: str, key: str | None, fn: Callable[[], T]) -> T:
        retrying = Retrying(
            stop=stop_after_attempt(max(1, self.options.max_attempts)),
            wait=wait_exponential(multiplier=self.options.backoff_initial, max=self.options.backoff_max)
            + wait_random(0, self.options.backoff_initial),
            retry=retry_if_exception(is_transient),
            reraise=True,
        )
        try:
            return retrying(fn)
        except (BotoCoreError, ClientError, OSError) as exc:
            raise map_error(exc, f"{what} {self.uri}/{key}" if key else f"{what} {self.uri}", key) from exc

    # --- writes ---------------------------------------------------------------------------
    def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
        """Write ``key``; create-only (``if_absent``) writes are always one PutObject.

        Why one request: servers honour ``If-None-Match: *`` on PutObject but not all of them on
        CompleteMultipartUpload (Ceph RGW 16 completes and overwrites), so a create-only object
        goes up whole, up to S3's single-PUT limit of 5 GiB.
        """
        full = self._full(key)
        view = memoryview(data).cast("B")
        if len(view) <= self._threshold or if_absent:
            if len(view) > _MAX_SINGLE_PUT:
                raise StorageError(
                    f"PUT {self.uri}/{key}: a create-only object is one PUT, at most 5 GiB; this one is "
                    f"{len(view)} bytes",
                    key=key,
                )
            extra: dict[str, str] = {"IfNoneMatch": "*"} if if_absent else {}

            def put_once() -> None:
                self.client.put_object(
                    Bucket=self.bucket, Key=full, Body=_ViewReader(view), ContentLength=len(view), **extra
                )

            self._call("PUT", key, put_once)
            return
        self._put_multipart(key, full, view)

    def _put_multipart(self, key: str, full: str, view: memoryview) -> None:
        # Nothing is read from CompleteMultipartUpload's answer: Ceph RGW 16 answers it with an
        # empty ETag (HEAD has the real one).
        upload_id = self._call(
            "CreateMultipartUpload",
            key,
            lambda: self.client.create_multipart_upload(Bucket=self.bucket, Key=full)["UploadId"],
        )
        try:
            part = self.options.part_size
            starts = list(range(0, len(view), part))

            def send(number: int, start: int) -> dict[str, Any]:
                body = view[start : start + part]

                def once() -> str:
                    resp = self.client.upload_part(
                        Bucket=self.bucket,
                        Key=full,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=_ViewReader(body),
                        ContentLength=len(body),
                    )
                    return str(resp["ETag"])

                return {"PartNumber": number, "ETag": self._call(f"UploadPart {number}", key, once)}

            parts = run_all(self._pool, send, [(i + 1, s) for i, s in enumerate(starts)])
            self._call(
                "CompleteMultipartUpload",
                key,
                lambda: self.client.complete_multipart_upload(
                    Bucket=self.bucket, Key=full, UploadId=upload_id, MultipartUpload={"Parts": parts}
                ),
            )
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=full, UploadId=upload_id)
            except Exception as exc:  # the upload is left for GC (list_incomplete) to abort
                log.warning("could not abort multipart upload %s of %s: %s", upload_id, full, exc)
            raise

    # --- reads ----------------------------------------------------------------------------
    def get(self, key: str, *, max_size: int | None = None) -> bytes:
        full = self._full(key)

        def once() -> bytes:
            resp = self.client.get_object(Bucket=self.bucket, Key=full)
            size = int(resp.get("ContentLength", 0))
            if max_size is not None and size > max_size:
                resp["Body"].close()
                raise StorageError(f"{key} is {size} bytes, more than the {max_size} expected", key=key)
            return bytes(resp["Body"].read())

        return self._call("GET", key, once)

    def read_into(self, key: str, out: memoryview, *, offset: int = 0) -> None:
        full = self._full(key)
        out = out.cast("B")
        part = read_part_size(len(out), self.options.part_size, self.options.max_concurrency)

        def fetch(start: int) -> None:
            view = out[start : min(start + part, len(out))]
            first, last = offset + start, offset + start + len(view) - 1

            def once() -> None:
                resp = self.client.get_object(Bucket=self.bucket, Key=full, Range=f"bytes={first}-{last}")
                got = _read_body_into(resp, view)
                if got != len(view):
                    raise StorageError(f"{key}: short read, got {got} of {len(view)} bytes at {first}", key=key)

            self._call("GET", key, once)

        if not len(out):
            self.stat(key)
            return
        starts = range(0, len(out), part)
        if len(starts) == 1:
            fetch(0)
            return
        run_all(self._pool, fetch, [(s,) for s in starts])

    def stat(self, key: str) -> ObjectInfo:
        full = self._full(key)
        resp = self._call("HEAD", key, lambda: self.client.head_object(Bucket=self.bucket, Key=full))
        return ObjectInfo(key, int(resp["ContentLength"]), resp["LastModified"].timestamp())

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        validate_key(prefix, allow_empty=True, what="prefix")
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix

        def once() -> list[ObjectInfo]:
            # Pages by hand: botocore's paginator loads its own JSON model on first use (~8 ms of a
            # restart's critical path), for a loop this short.
            out: list[ObjectInfo] = []
            token: dict[str, str] = {}
            while True:
                page = self.client.list_objects_v2(Bucket=self.bucket, Prefix=full, **token)
                for obj in page.get("Contents", []):
                    out.append(ObjectInfo(self._rel(obj["Key"]), int(obj["Size"]), obj["LastModified"].timestamp()))
                following = page.get("NextContinuationToken") if page.get("IsTruncated") else None
                if not following:
                    return out
                if following == token.get("ContinuationToken"):
                    raise StorageError(
                        f"LIST {self.uri}/{prefix}: the server repeated its continuation token", key=prefix
                    )
                token = {"ContinuationToken": following}

        return sorted(self._call("LIST", prefix, once), key=lambda o: o.key)

    def delete(self, keys: Sequence[str]) -> None:
        fulls = [self._full(k) for k in keys]
        for i in range(0, len(fulls), 1000):
            batch = fulls[i : i + 1000]

            def once(batch: list[str] = batch) -> Any:
                return self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )

            resp = self._call("DELETE", batch[0], once)
            errors = [e for e in resp.get("Errors", []) if e.get("Code") not in ("NoSuchKey",)]
            if errors:
                e = errors[0]
                raise StorageError(
                    f"DELETE {self.uri}: {e.get('Key')}: {e.get('Code')} {e.get('Message')}",
                    key=self._rel(str(e.get("Key", ""))),
                )

    def prepare_prefix(self, prefix: str) -> None:
        validate_key(prefix, allow_empty=True, what="prefix")

    def list_incomplete(self, prefix: str) -> list[IncompleteUpload]:
        validate_key(prefix, allow_empty=True, what="prefix")
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix

        def once() -> list[IncompleteUpload]:
            out = []
            for page in self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=full):
                for up in page.get("Uploads", []):
                    out.append(IncompleteUpload(self._rel(up["Key"]), up["UploadId"], up["Initiated"].timestamp()))
            return out

        return self._call("ListMultipartUploads", prefix, once)

    def abort_incomplete(self, upload: IncompleteUpload) -> None:
        full = self._full(upload.key)

        def once() -> None:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=full, UploadId=upload.handle)
            except ClientError as exc:
                if _error_code(exc) not in _NOT_FOUND_CODES:
                    raise

        self._call("AbortMultipartUpload", upload.key, once)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
