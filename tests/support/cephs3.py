"""Ceph's S3 (RADOS Gateway) for tests: the one ``deploy/local/ceph-s3.sh up`` runs, found by its env file.

Ceph needs root and ~15 s to start, so tests do not start it per session: CI (scripts/test.sh)
brings it up beside the stack, and tests skip it when it is not up (or fail under
CLUSTERCTL_REQUIRE_STACK=1). ``stop()``/``start()`` kill and restart the gateway alone: the monitor
and the OSD keep running, so the objects survive, as the fault tests expect of a restarted server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .paths import ROOT
from .s3client import aws_env, boto3_client
from .stack import read_env_file

CEPH_DIR = Path(os.environ.get("CLUSTERCTL_CEPH_DIR", "/var/lib/clusterctl-ceph"))
CEPH_S3_SH = ROOT / "deploy" / "local" / "ceph-s3.sh"


@dataclass
class CephS3:
    """The running gateway: endpoint and keys from its env file."""

    directory: Path
    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    region: str = "us-east-1"
    name: str = "ceph"

    @classmethod
    def load(cls, directory: Path = CEPH_DIR) -> CephS3 | None:
        """The gateway ceph-s3.sh runs from ``directory``, or None when it is not up (or not readable)."""
        try:
            env = read_env_file(directory / "env")
        except (FileNotFoundError, PermissionError):  # not up, or root's 0700 state dir: skip either way
            return None
        return cls(
            directory,
            env["AWS_ENDPOINT_URL"],
            env["AWS_ACCESS_KEY_ID"],
            env["AWS_SECRET_ACCESS_KEY"],
            env["CLUSTERCTL_S3_BUCKET"],
            env.get("AWS_REGION", "us-east-1"),
        )

    def env(self) -> dict[str, str]:
        """AWS_* variables that point boto3 (and CheckpointManager) at this server."""
        return aws_env(self.endpoint, self.access_key, self.secret_key, self.region)

    def client(self) -> Any:
        return boto3_client(self.endpoint, self.access_key, self.secret_key, self.region)

    def stop(self) -> None:
        """Kill the gateway (SIGKILL); the cluster behind it keeps the objects."""
        pidfile = self.directory / "run" / "radosgw.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            pid = int(pidfile.read_text())
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.05)

    def start(self) -> None:
        """Start the gateway again (``ceph-s3.sh up`` starts only what is down) and wait for S3."""
        subprocess.run(["bash", str(CEPH_S3_SH), "up"], check=True, stdout=subprocess.DEVNULL, timeout=180)
