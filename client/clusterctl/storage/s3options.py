"""S3 connection and transfer settings, apart from the backend so that reading them imports no botocore."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class S3Options:
    """Connection and transfer settings. ``None`` fields fall back to the AWS_* environment.

    Attributes:
        endpoint_url: e.g. ``http://127.0.0.1:8333``; None = AWS_ENDPOINT_URL(_S3) or AWS.
        region: None = AWS_REGION / AWS_DEFAULT_REGION, else ``us-east-1``.
        access_key_id, secret_access_key, session_token: None = the standard credential chain.
        part_size: multipart part size in bytes (S3 minimum 5 MiB except the last part).
        multipart_threshold: objects larger than this use multipart (None = part_size).
        max_concurrency: parallel part uploads / ranged downloads (bounded pool).
        connect_timeout, read_timeout: per-request deadlines in seconds.
        max_attempts: tries per request, including the first, for transient errors.
        backoff_initial, backoff_max: exponential backoff bounds in seconds (with jitter).
        thread_nice: nice increment of the I/O worker threads (0 = same priority as the caller).
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    part_size: int = 64 << 20
    multipart_threshold: int | None = None
    max_concurrency: int = 8
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    max_attempts: int = 5
    backoff_initial: float = 0.25
    backoff_max: float = 8.0
    thread_nice: int = 0
