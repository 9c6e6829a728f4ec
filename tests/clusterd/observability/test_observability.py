"""Metrics endpoint, request ids and JSON logs, in-process (the real-stack check is in tests/integration)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd.observability.context import bind, unbind
from clusterd.observability.logs import configure_logging
from clusterd.observability.metrics import REGISTRY
from clusterd.server import ClusterDaemon
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.runner import CommandRunner, command_label
from tests.support.promtext import scrape

from ..conftest import USER_A, auth, make_config


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("json", "DEBUG", stream)
    try:
        yield stream
    finally:
        configure_logging("text", "WARNING")


def log_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ClusterDaemon, FakeSlurm, jobs_pb2_grpc.JobServiceStub]]:
    slurm = FakeSlurm.cluster()
    config = replace(make_config(tmp_path), metrics_listen="127.0.0.1:0")
    daemon = ClusterDaemon(config, backend=slurm)
    await daemon.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}")
    try:
        yield daemon, slurm, jobs_pb2_grpc.JobServiceStub(channel)
    finally:
        await channel.close()
        await daemon.stop()


def submit_request(name: str = "obs") -> jobs_pb2.SubmitJobRequest:
    return jobs_pb2.SubmitJobRequest(spec=jobs_pb2.JobSpec(name=name, command=["hostname"]))


async def test_rpcs_counted_by_method_and_code_on_the_endpoint(served, json_logs) -> None:  # type: ignore[no-untyped-def]
    daemon, _, jobs = served
    assert daemon.metrics_port
    ok_before = sample("clusterd_rpcs_total", method="JobService/SubmitJob", code="OK")
    bad_before = sample("clusterd_rpcs_total", method="JobService/SubmitJob", code="INVALID_ARGUMENT")
    unauth_before = sample("clusterd_rpcs_total", method="JobService/GetJob", code="UNAUTHENTICATED")
    hist_before = sample("clusterd_rpc_latency_seconds_count", method="JobService/SubmitJob")

    await jobs.SubmitJob(submit_request(), metadata=auth(USER_A))
    with pytest.raises(grpc.aio.AioRpcError):
        await jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=jobs_pb2.JobSpec()), metadata=auth(USER_A))
    with pytest.raises(grpc.aio.AioRpcError):
        await jobs.GetJob(jobs_pb2.GetJobRequest(job_id="1"))
    await daemon.poller.poll_once()

    got = await asyncio.to_thread(scrape, daemon.metrics_port)  # the daemon serves it on this loop
    assert got['clusterd_rpcs_total{code="OK",method="JobService/SubmitJob"}'] == ok_before + 1
    assert got['clusterd_rpcs_total{code="INVALID_ARGUMENT",method="JobService/SubmitJob"}'] == bad_before + 1
    assert got['clusterd_rpcs_total{code="UNAUTHENTICATED",method="JobService/GetJob"}'] == unauth_before + 1
    assert got['clusterd_rpc_latency_seconds_count{method="JobService/SubmitJob"}'] == hist_before + 2
    assert got['clusterd_jobs{state="PENDING"}'] + got['clusterd_jobs{state="RUNNING"}'] >= 1
    assert got["clusterd_queue_poll_latency_seconds_count{}"] >= 1
    assert got["process_resident_memory_bytes{}"] > 0  # for sizing
    assert got['clusterd_slurm_info{backend="fake",version="22.05.8"}'] == 1


async def test_request_id_returned_honoured_and_sanitised(served, json_logs) -> None:  # type: ignore[no-untyped-def]
    _, _, jobs = served
    call = jobs.SubmitJob(submit_request(), metadata=[*auth(USER_A), ("x-request-id", "trace-42.a")])
    await call
    assert ("x-request-id", "trace-42.a") in tuple(await call.trailing_metadata())

    # Refused calls carry it too: that is when a user needs to quote it to an operator.
    bad = jobs.GetJob(jobs_pb2.GetJobRequest(job_id="1"), metadata=[("x-request-id", "evil $(id) " + "x" * 80)])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await bad
    ids = [v for k, v in (info.value.trailing_metadata() or ()) if k == "x-request-id"]
    assert len(ids) == 1 and ids[0].isalnum()

    lines = log_lines(json_logs)
    rpc = [ln for ln in lines if ln.get("request_id") == "trace-42.a" and ln["message"].startswith("rpc ")]
    assert rpc and rpc[0]["code"] == "OK" and rpc[0]["caller"] == USER_A and rpc[0]["method"] == "JobService/SubmitJob"
    assert all("evil" not in json.dumps(ln) for ln in lines)


async def test_runner_logs_the_command_with_the_calls_request_id(tmp_path: Path, json_logs) -> None:  # type: ignore[no-untyped-def]
    """A stand-in ``sbatch`` (a shell script) shows the runner's log line and its metric."""
    fake = tmp_path / "sbatch"
    fake.write_text("#!/bin/sh\necho 4242\n")
    fake.chmod(0o755)
    failing = tmp_path / "scancel"
    failing.write_text("#!/bin/sh\necho 'scancel: error: Invalid job id specified' >&2\nexit 1\n")
    failing.chmod(0o755)
    runner = CommandRunner(bin_dir=str(tmp_path))
    ok_before = sample("clusterd_slurm_calls_total", backend="commands", command="sbatch", outcome="ok")
    err_before = sample("clusterd_slurm_calls_total", backend="commands", command="scancel", outcome="error")
    tokens = bind("req-7", "JobService/SubmitJob")
    try:
        await runner.run(["sbatch", "--parsable", "--job-name=x"], stdin="#!/bin/sh\n")
        with pytest.raises(Exception, match="Invalid job id"):
            await runner.run(["scancel", "99"])
    finally:
        unbind(tokens)
    await runner.run(["sbatch", "--parsable"])  # outside any call: no request id
    calls = "clusterd_slurm_calls_total"
    assert sample(calls, backend="commands", command="sbatch", outcome="ok") == ok_before + 2
    assert sample(calls, backend="commands", command="scancel", outcome="error") == err_before + 1
    lines = [ln for ln in log_lines(json_logs) if str(ln["message"]).startswith("slurm ")]
    assert [(ln["request_id"], ln["argv"], ln["rc"]) for ln in lines] == [
        ("req-7", ["sbatch", "--parsable", "--job-name=x"], 0),
        ("req-7", ["scancel", "99"], 1),
        (None, ["sbatch", "--parsable"], 0),
    ]
    assert "Invalid job id" in str(lines[1]["stderr"])
    assert lines[1]["level"] == "INFO" and lines[1]["method"] == "JobService/SubmitJob"


def test_command_labels_stay_few() -> None:
    assert command_label(["scontrol", "update", "jobid=1", "StartTime=now"]) == "scontrol update"
    assert command_label(["squeue", "--all", "--json"]) == "squeue"
    assert command_label(["sbatch", "--version"]) == "sbatch --version"


def test_text_format_and_bad_format(tmp_path: Path) -> None:
    stream = io.StringIO()
    configure_logging("text", "INFO", stream)
    try:
        tokens = bind("abc123", "m")
        logging.getLogger("t").info("hello")
        unbind(tokens)
        assert "[abc123]: hello" in stream.getvalue()
        with pytest.raises(ValueError, match="log_format"):
            configure_logging("xml", "INFO", stream)
    finally:
        configure_logging("text", "WARNING")


def test_a_json_line_has_its_fields_and_no_caller_lookup(json_logs: io.StringIO) -> None:
    """No format shows where a line was logged from, so the record is not made to find out."""
    seen: list[logging.LogRecord] = []
    catch = logging.Handler()
    catch.emit = seen.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(catch)
    try:
        logging.getLogger("clusterd.t").info("hello %s", "there", extra={"duration_ms": 1.5})
    finally:
        logging.getLogger().removeHandler(catch)
    (line,) = log_lines(json_logs)
    expected = {"level": "INFO", "logger": "clusterd.t", "message": "hello there", "duration_ms": 1.5}
    assert expected.items() <= line.items()
    assert "time" in line and "request_id" in line
    assert (seen[0].lineno, seen[0].threadName, seen[0].processName) == (0, None, None)


def test_serve_refuses_bad_log_settings(tmp_path: Path) -> None:
    from clusterd.main import main

    cfg = tmp_path / "c.toml"
    cfg.write_text(f'state_dir = "{tmp_path}"\nlog_format = "xml"\n')
    assert main(["serve", "--config", str(cfg)]) == 2
    assert os.listdir(tmp_path) == ["c.toml"]  # refused before anything was created


async def test_metrics_port_taken_is_named(tmp_path: Path) -> None:
    import socket

    from clusterd.config import ConfigError
    from clusterd.web.server import combined, serve

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot serve HTTP on 127.0.0.1:{port}"):
            await serve(f"127.0.0.1:{port}", combined(None))
    with pytest.raises(ConfigError, match="host:port"):
        await serve("9464", combined(None))


async def test_healthz_says_the_role_and_refuses_when_not_ready() -> None:
    import json
    import urllib.error
    import urllib.request

    from clusterd.web.server import combined, serve

    def fetch(url: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read()

    state = {"role": "follower", "replica": "a", "epoch": 0}
    server = await serve("127.0.0.1:0", combined(None, lambda: state))
    try:
        url = f"http://127.0.0.1:{server.port}/healthz"
        status, body = await asyncio.to_thread(fetch, url)
        assert status == 200 and json.loads(body)["role"] == "follower"
        state["role"] = "not ready"
        status, body = await asyncio.to_thread(fetch, url)
        assert status == 503 and json.loads(body)["role"] == "not ready"
    finally:
        await server.stop()
