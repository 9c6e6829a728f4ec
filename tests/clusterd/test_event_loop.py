"""No blocking call runs on clusterd's event loop.

The in-process service over FakeSlurm serves every RPC while guards wrap the blocking calls the
service is known to make (user and group lookups, directory creation and ownership, stat, file
opens and writes). A guarded call made on the event loop's thread from service code is recorded
with the service's file:line; calls from worker threads (``asyncio.to_thread``) or from code that
is not clusterd's (grpc, sqlite, the test) pass. Start-up and shutdown run before and after the
guards: only the serving path is checked.
"""

from __future__ import annotations

import asyncio
import grp
import io
import os
import pwd
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

import clusterd
from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd import accounts
from clusterd.jobs import logs
from clusterd.jobs.users import resolve_unix_user
from clusterd.server import ClusterDaemon
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.types import JobState

from .conftest import USER_A, auth, make_config

SERVICE_DIR = str(Path(clusterd.__file__).resolve().parent)
GUARDED: tuple[tuple[Any, str], ...] = (
    (pwd, "getpwnam"),
    (pwd, "getpwuid"),
    (grp, "getgrgid"),
    (grp, "getgrnam"),
    (os, "getgrouplist"),
    (os, "makedirs"),
    (os, "mkdir"),
    (os, "chown"),
    (os, "stat"),
    (os, "open"),
    (os, "write"),
    (io, "open"),
    (logs, "expand"),  # filling an output name: CPU over the user's text
)


class LoopGuard:
    """Records guarded calls that service code makes on the loop's thread."""

    def __init__(self, loop_thread: int) -> None:
        self.loop_thread = loop_thread
        self.violations: list[str] = []
        self.off_loop: set[str] = set()  # guarded calls service code made in worker threads

    def wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if site := service_frame():
                if threading.get_ident() == self.loop_thread:
                    self.violations.append(f"{name} at {site}")
                else:
                    self.off_loop.add(name)
            return real(*args, **kwargs)

        return guarded


def service_frame() -> str | None:
    """The innermost clusterd frame on the stack (as ``clusterd/x.py:LINE in fn``), or None."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(SERVICE_DIR):
            return f"clusterd{path[len(SERVICE_DIR) :]}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


@pytest.fixture
def guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopGuard]:
    g = LoopGuard(threading.get_ident())  # pytest-asyncio runs the loop on this thread
    yield g
    monkeypatch.undo()


def install(guard: LoopGuard, monkeypatch: pytest.MonkeyPatch) -> None:
    accounts.ACCOUNTS.forget()  # each account is looked up anew: a kept one would hide where lookups run
    for module, name in GUARDED:
        monkeypatch.setattr(module, name, guard.wrap(f"{module.__name__}.{name}", getattr(module, name)))


async def test_guard_catches_a_lookup_on_the_loop(guard: LoopGuard, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard itself: a service lookup on the loop is caught, the same lookup in a thread is not."""
    install(guard, monkeypatch)
    await asyncio.to_thread(resolve_unix_user, USER_A)
    assert guard.violations == []
    accounts.ACCOUNTS.forget()
    resolve_unix_user(USER_A)
    assert guard.violations and guard.violations[0].startswith("pwd.getpwnam at clusterd/accounts.py:")


async def test_serving_every_rpc_blocks_nothing_on_the_loop(
    tmp_path: Path, guard: LoopGuard, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = replace(make_config(tmp_path), tokens_reload_seconds=0.05)
    slurm = FakeSlurm.cluster()
    daemon = ClusterDaemon(config, backend=slurm)
    await daemon.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}")
    jobs = jobs_pb2_grpc.JobServiceStub(channel)
    me = auth(USER_A)
    try:
        install(guard, monkeypatch)
        spec = jobs_pb2.JobSpec(command=["hostname"])
        job = (await jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), metadata=me)).job
        script = jobs_pb2.JobSpec(script="#!/bin/bash\n#SBATCH --nodes=1\nhostname\n")
        scripted = (await jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=script), metadata=me)).job
        await jobs.ListJobs(jobs_pb2.ListJobsRequest(include_finished=True), metadata=me)
        await jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job.job_id), metadata=me)

        watch = jobs.WatchJobs(jobs_pb2.WatchJobsRequest(include_initial=True), metadata=me)
        await asyncio.wait_for(watch.read(), 5)
        slurm.set_state(job.job_id, JobState.RUNNING, nodes=("node1",))
        await daemon.poller.poll_once()
        await asyncio.wait_for(watch.read(), 5)
        await jobs.RequeueJob(jobs_pb2.RequeueJobRequest(job_id=job.job_id), metadata=me)
        await jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=scripted.job_id), metadata=me)
        await daemon.poller.poll_once()
        watch.cancel()

        # token reload: a new token in the file is picked up by the watcher, off the loop
        tokens = Path(config.tokens_file)
        await asyncio.to_thread(
            tokens.write_text,
            tokens.read_text() + '[[token]]\nuser = "nobody"\ntoken = "token-reloaded-xxxxxxxx"\nadmin = false\n',
        )
        fresh = [("authorization", "Bearer token-reloaded-xxxxxxxx")]
        for _ in range(200):
            try:
                await jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=fresh)
                break
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("the edited tokens file was not picked up")
    finally:
        monkeypatch.undo()
        await channel.close()
        await daemon.stop()
    assert guard.violations == [], "blocking calls on the event loop:\n" + "\n".join(sorted(set(guard.violations)))
    # the guards saw the work happen, in worker threads: user lookup, job dir, token file stat, audit line
    assert {"pwd.getpwnam", "os.stat", "os.write"} <= guard.off_loop, guard.off_loop


async def test_reading_logs_fills_a_huge_output_width_off_the_loop(
    tmp_path: Path, guard: LoopGuard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-o out-%200000000n.log``: ReadJobLog fills the name in a worker thread, clamped as Slurm
    clamps it, and the loop keeps ticking (it used to build a 200 MB string on the loop)."""
    slurm = FakeSlurm.cluster()
    daemon = ClusterDaemon(make_config(tmp_path), backend=slurm)
    await daemon.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}")
    jobs = jobs_pb2_grpc.JobServiceStub(channel)
    me = auth(USER_A)
    gaps: list[float] = []

    async def tick() -> None:
        last = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(0.005)
            now = asyncio.get_running_loop().time()
            gaps.append(now - last)
            last = now

    try:
        spec = jobs_pb2.JobSpec(command=["hostname"], stdout_path="/nonexistent/out-%200000000n.log")
        job = (await jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), metadata=me)).job
        slurm.set_state(job.job_id, JobState.RUNNING, nodes=("node1",))
        await daemon.poller.poll_once()
        install(guard, monkeypatch)
        ticker = asyncio.create_task(tick())
        with pytest.raises(grpc.aio.AioRpcError) as err:  # no such file: the name is what matters here
            async for _ in jobs.ReadJobLog(jobs_pb2.ReadJobLogRequest(job_id=job.job_id), metadata=me):
                pass
        # The tick whose sleep spans the call is recorded when it wakes: without root (no helper
        # process to start) the call may end within one tick.
        await asyncio.sleep(0.02)
        ticker.cancel()
    finally:
        monkeypatch.undo()
        await channel.close()
        await daemon.stop()
    assert "/nonexistent/out-0000000000.log" in (err.value.details() or "")
    assert guard.violations == [], "blocking calls on the event loop:\n" + "\n".join(sorted(set(guard.violations)))
    assert gaps and max(gaps) < 0.5, max(gaps)


async def test_liveness_probes_block_nothing_on_the_loop(guard: LoopGuard, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node probe's connect runs in its own threads, so a stalled loop cannot fake a timeout and
    a slow connect cannot stall the loop."""
    import socket

    from clusterd.liveness.probe import Reach, SlurmdProber

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connects are refused
    prober = SlurmdProber(0.5)
    try:
        monkeypatch.setattr(
            socket, "create_connection", guard.wrap("socket.create_connection", socket.create_connection)
        )
        assert await prober.probe("127.0.0.1", listening.getsockname()[1]) is Reach.ANSWERS
        assert await prober.probe("127.0.0.1", closed.getsockname()[1]) is Reach.REFUSED
    finally:
        monkeypatch.undo()
        prober.close()
        listening.close()
        closed.close()
    assert guard.violations == [] and guard.off_loop == {"socket.create_connection"}
