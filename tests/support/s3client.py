"""What a test needs to talk to an S3 test server, whichever server it is (SeaweedFS or Ceph)."""

from __future__ import annotations

from typing import Any


def aws_env(endpoint: str, access_key: str, secret_key: str, region: str) -> dict[str, str]:
    """AWS_* variables that point boto3 (and CheckpointManager) at a test server."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
    }


def boto3_client(endpoint: str, access_key: str, secret_key: str, region: str) -> Any:
    """A boto3 S3 client for a test server (path-style, short deadlines, a few retries)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=region,
        config=Config(
            s3={"addressing_style": "path"},
            connect_timeout=2,
            read_timeout=20,
            retries={"total_max_attempts": 3, "mode": "standard"},
        ),
    )
