"""An in-process clusterd over FakeSlurm, for fast tests of the service's logic."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from clusterctl.v1 import cluster_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from clusterd.config import Config, LimitsConfig, RestartDefaults, SlurmConfig
from clusterd.server import ClusterDaemon
from clusterd.slurm.fake import FakeSlurm
from clusterd.store.jobs import JobRecords
from clusterd.store.store import Store, sqlite_store
from clusterd.supervisor.cache import QueueCache
from clusterd.supervisor.progress import ProgressReader
from clusterd.supervisor.reconciler import Reconciler
from clusterd.supervisor.restarts import Restarter
from clusterd.supervisor.sink import EventSink

# Unix users that exist on every Debian machine; jobs "run" as them in the fake.
USER_A, USER_B, ADMIN = "nobody", "daemon", "root"
TOKENS = {USER_A: "token-aaaaaaaaaaaaaaaa", USER_B: "token-bbbbbbbbbbbbbbbb", ADMIN: "token-admin-xxxxxxxxxx"}


def write_tokens(path: Path) -> None:
    lines = []
    for user, token in TOKENS.items():
        lines += ["[[token]]", f'user = "{user}"', f'token = "{token}"', f"admin = {str(user == ADMIN).lower()}", ""]
    path.write_text("\n".join(lines))


def auth(user: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {TOKENS[user]}")]


@dataclass
class Harness:
    daemon: ClusterDaemon
    slurm: FakeSlurm
    channel: grpc.aio.Channel
    jobs: jobs_pb2_grpc.JobServiceStub
    cluster: cluster_pb2_grpc.ClusterServiceStub

    async def poll(self) -> None:
        await self.daemon.poller.poll_once()


def make_config(tmp_path: Path, **limits: int) -> Config:
    tokens = tmp_path / "tokens.toml"
    write_tokens(tokens)
    return Config(
        listen="127.0.0.1:0",
        allow_insecure=True,  # plaintext loopback TCP: in-process tests only (the unix socket is tests/security's)
        state_dir=str(tmp_path / "state"),
        tokens_file=str(tokens),
        poll_interval_seconds=3600.0,  # tests drive polls by hand
        slurm=SlurmConfig(default_partition="debug", job_root=str(tmp_path / "jobs")),
        limits=LimitsConfig(**limits),
    )


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    slurm = FakeSlurm.cluster()
    daemon = ClusterDaemon(make_config(tmp_path, max_script_bytes=4096), backend=slurm)
    await daemon.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}")
    try:
        yield Harness(
            daemon, slurm, channel, jobs_pb2_grpc.JobServiceStub(channel), cluster_pb2_grpc.ClusterServiceStub(channel)
        )
    finally:
        await channel.close()
        await daemon.stop()


def base_config(tmp_path: Path, **limits: Any) -> Config:
    """:func:`make_config` with any LimitsConfig field overridable (floats and bools included)."""
    cfg = make_config(tmp_path)
    return replace(cfg, limits=replace(LimitsConfig(), **limits))


@contextlib.asynccontextmanager
async def running(config: Config, slurm: FakeSlurm | None = None) -> AsyncIterator[ClusterDaemon]:
    """A started in-process clusterd over ``slurm`` (a fresh FakeSlurm cluster by default)."""
    daemon = ClusterDaemon(config, backend=slurm or FakeSlurm.cluster())
    await daemon.start()
    try:
        yield daemon
    finally:
        await daemon.stop()


def command_request(**kw: Any) -> jobs_pb2.SubmitJobRequest:
    return jobs_pb2.SubmitJobRequest(spec=jobs_pb2.JobSpec(command=["hostname"], **kw))


async def code_of(call: Any) -> grpc.StatusCode:
    """The status code a call ends with (OK when it succeeds)."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def stub(channel: grpc.aio.Channel) -> jobs_pb2_grpc.JobServiceStub:
    return jobs_pb2_grpc.JobServiceStub(channel)


def supervised(
    slurm: FakeSlurm,
    store: JobRecords,
    events: EventSink,
    progress: ProgressReader,
    defaults: RestartDefaults | None = None,
    *,
    kick: Callable[[], None] = lambda: None,
    default_partition: str = "",
) -> QueueCache:
    """A queue cache with the reconciler and restarter subscribed, as ClusterDaemon wires them;
    tests drive it with ``poll_once()`` (the interval is an hour)."""
    cache = QueueCache(slurm, interval=3600.0, default_partition=default_partition)
    restarter = Restarter(slurm, store, events, progress, defaults or RestartDefaults())
    reconciler = Reconciler(store, events, restarter, progress, kick=kick, want_whole=cache.want_whole)
    cache.subscribe(reconciler)
    cache.focus_on(reconciler.focus)
    return cache


@pytest.fixture
async def embedded_store(tmp_path: Path) -> AsyncIterator[Store]:
    """An opened SQLite store of this test's own (tests/clusterd/store runs both databases)."""
    store = sqlite_store(tmp_path / "db.sqlite3")
    await store.open()
    yield store
    await store.close()
