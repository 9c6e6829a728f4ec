"""Shared pieces for the security tests: an in-process clusterd over FakeSlurm with any Config."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
from integration.conftest import Daemon, Stack, stack  # noqa: F401  (the stack fixture, for test_load)
from service.conftest import USER_A, auth, make_config  # tests/ is on sys.path (tests/conftest.py)

from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd.config import Config, LimitsConfig
from clusterd.server import ClusterDaemon
from clusterd.slurm.fake import FakeSlurm

__all__ = ["USER_A", "Daemon", "Stack", "auth", "base_config", "code_of", "command_request", "running"]


def base_config(tmp_path: Path, **limits: Any) -> Config:
    """tests/service's config (plaintext tokens for nobody/daemon/root), limits overridable."""
    cfg = make_config(tmp_path)
    return replace(cfg, limits=replace(LimitsConfig(), **limits))


@contextlib.asynccontextmanager
async def running(config: Config, slurm: FakeSlurm | None = None) -> AsyncIterator[ClusterDaemon]:
    daemon = ClusterDaemon(config, backend=slurm or FakeSlurm.cluster())
    await daemon.start()
    try:
        yield daemon
    finally:
        await daemon.stop()


def command_request(**kw: Any) -> jobs_pb2.SubmitJobRequest:
    return jobs_pb2.SubmitJobRequest(spec=jobs_pb2.JobSpec(command=["hostname"], **kw))


async def code_of(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def stub(channel: grpc.aio.Channel) -> jobs_pb2_grpc.JobServiceStub:
    return jobs_pb2_grpc.JobServiceStub(channel)
