"""The dashboard's HTTP edge over FakeSlurm: tokens, ownership, read-only, headers, bad input."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import stat
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clusterctl.v1 import jobs_pb2, jobs_pb2_grpc
from clusterd.config import ConfigError, WebConfig, load_config
from clusterd.server import ClusterDaemon
from clusterd.slurm.fake import FakeSlurm
from clusterd.web.server import check_web_transport
from tests.clusterd.conftest import TOKENS, USER_A, USER_B, auth, command_request, make_config, running


def _get(port: int, path: str, token: str | None, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


async def get(port: int, path: str, user: str | None = USER_A, method: str = "GET") -> tuple[int, Any]:
    status, _headers, body = await asyncio.to_thread(_get, port, path, TOKENS[user] if user else None, method)
    return status, json.loads(body) if body.startswith(b"{") else body


def _web_config(tmp_path: Path, **web: Any) -> Any:
    return replace(make_config(tmp_path), metrics_listen="127.0.0.1:0", web=WebConfig(enabled=True, **web))


async def _submit(daemon: ClusterDaemon, user: str) -> str:
    import grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as channel:
        resp = await jobs_pb2_grpc.JobServiceStub(channel).SubmitJob(command_request(name="web"), metadata=auth(user))
    return resp.job.job_id


async def test_api_needs_a_token_and_shows_only_the_callers_jobs(tmp_path: Path) -> None:
    async with running(_web_config(tmp_path)) as daemon:
        port = daemon.web_port
        assert port is not None and port == daemon.metrics_port  # one listener: /metrics and the dashboard
        alice_job = await _submit(daemon, USER_A)
        await daemon.poller.poll_once()
        assert (await get(port, "/api/jobs", user=None))[0] == 401
        status, _, _ = await asyncio.to_thread(_get, port, "/api/jobs", "not-a-token")
        assert status == 401
        status, body = await get(port, "/api/jobs")
        assert status == 200 and [j["job_id"] for j in body["jobs"]] == [alice_job]
        status, body = await get(port, f"/api/jobs/{alice_job}", user=USER_B)
        assert status == 403 and body["code"] == "PERMISSION_DENIED"
        status, body = await get(port, f"/api/jobs/{alice_job}")
        assert status == 200 and body["job"]["user"] == USER_A
        status, body = await get(port, "/api/jobs/1;2")
        assert status == 400 and body["error"].startswith("job_id:")
        status, body = await get(port, "/api/history?state=bogus")
        assert status == 400 and body["error"].startswith("state:")
        assert (await get(port, f"/api/jobs/{alice_job}", method="DELETE"))[0] == 405
        assert (await get(port, "/api/nothing"))[0] == 404
        assert (await get(port, "/api/nothing", user=None))[0] == 401  # every /api/ path asks for a token
        assert (await get(port, "/api/whoami", method="HEAD"))[0] == 200
        status, body = await get(port, "/api/whoami", user=USER_B)
        assert body == {"user": USER_B, "admin": False}


async def test_goodput_panels_follow_the_job_visibility_rules(tmp_path: Path) -> None:
    async with running(_web_config(tmp_path)) as daemon:
        port = daemon.web_port
        assert port is not None
        alice_job = await _submit(daemon, USER_A)
        await _submit(daemon, USER_B)
        await daemon.poller.poll_once()
        status, body = await get(port, f"/api/jobs/{alice_job}/goodput")
        assert status == 200 and set(body) >= {"ettr", "wall_seconds", "breakdown"}
        assert (await get(port, f"/api/jobs/{alice_job}/goodput", user=USER_B))[0] == 403
        status, body = await get(port, "/api/goodput", user=USER_B)  # bob's fleet view holds bob's jobs only
        assert status == 200 and [(r["user"], r["jobs"]) for r in body["rows"]] == [(USER_B, 1)]


async def test_page_is_served_locally_with_a_strict_policy(tmp_path: Path) -> None:
    async with running(_web_config(tmp_path)) as daemon:
        port = daemon.web_port
        assert port is not None
        status, headers, body = await asyncio.to_thread(_get, port, "/", None)
        assert status == 200 and b"/static/app.js" in body and b"http" not in body.split(b"<body>")[0]
        assert "script-src 'self'" in headers["Content-Security-Policy"] and headers["Cache-Control"] == "no-store"
        status, _, js = await asyncio.to_thread(_get, port, "/static/app.js", None)
        assert status == 200 and b"innerHTML" not in js  # user text is set as text, never parsed as markup
        status, _, metrics = await asyncio.to_thread(_get, port, "/metrics", None)
        assert status == 200 and b"clusterd_rpcs" in metrics


def test_plaintext_tokens_beyond_loopback_are_refused(tmp_path: Path) -> None:
    cfg = replace(_web_config(tmp_path), metrics_listen="0.0.0.0:9464", allow_insecure=False)
    with pytest.raises(ConfigError, match="plaintext"):
        check_web_transport(cfg)
    check_web_transport(replace(cfg, allow_insecure=True))
    check_web_transport(replace(cfg, metrics_listen="127.0.0.1:880"))


def test_a_port_any_local_user_could_bind_is_refused(tmp_path: Path) -> None:
    """While clusterd is down, whoever binds its dashboard's address collects the tokens sent there."""
    cfg = replace(_web_config(tmp_path), metrics_listen="127.0.0.1:9464", allow_insecure=False)
    for listen in ("127.0.0.1:9464", "localhost:1024", "[::1]:8080", "127.0.0.1:0"):
        with pytest.raises(ConfigError, match="any local user may bind port"):
            check_web_transport(replace(cfg, metrics_listen=listen))
    with pytest.raises(ConfigError, match="absolute"):
        check_web_transport(replace(cfg, web=replace(cfg.web, listen="unix:web.sock")))
    for listen in ("127.0.0.1:443", "[::1]:880", "unix:/run/clusterd/web.sock"):
        check_web_transport(replace(cfg, web=replace(cfg.web, listen=listen)))
    check_web_transport(replace(cfg, tls=replace(cfg.tls, cert_file="/etc/clusterd/tls.crt")))
    toml = tmp_path / "c.toml"
    toml.write_text('metrics_listen = "127.0.0.1:9464"\n[web]\nenabled = true\n')
    findings = by_check_config(str(toml))  # `clusterd check`; `serve` applies the same rule
    assert findings[0][0] == "FAIL" and "below 1024" in findings[0][1]
    with pytest.raises(ConfigError, match="below 1024"):
        check_web_transport(load_config(toml, environ={}))
    fixed = load_config(toml, environ={"CLUSTERD_WEB__LISTEN": "127.0.0.1:880"})
    check_web_transport(fixed)
    assert fixed.web.listen == "127.0.0.1:880"


def by_check_config(path: str) -> list[tuple[str, str]]:
    from clusterd.check import check_config

    return [(f.status, f.detail) for f in check_config(path)[1]]


async def test_dashboard_on_a_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "web.sock"
    cfg = replace(_web_config(tmp_path, listen=f"unix:{sock}"), socket_group="")
    async with running(cfg, FakeSlurm.cluster()) as daemon:
        assert daemon.web_port == 0 and stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        status, body = await asyncio.to_thread(_unix_get, sock, "/api/whoami", TOKENS[USER_A])
        assert status == 200 and json.loads(body)["user"] == USER_A
    assert not sock.exists()


def _unix_get(sock: Path, path: str, token: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("localhost", timeout=10)
    conn.sock = socket.socket(socket.AF_UNIX)
    conn.sock.connect(str(sock))
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    reply = conn.getresponse()
    try:
        return reply.status, reply.read()
    finally:
        conn.close()


async def test_own_listener_when_configured(tmp_path: Path) -> None:
    cfg = _web_config(tmp_path, listen="127.0.0.1:0")
    async with running(cfg, FakeSlurm.cluster()) as daemon:
        assert daemon.web_port not in (None, daemon.metrics_port)
        assert daemon.web_port is not None
        status, body = await get(daemon.web_port, "/api/topology")
        assert status == 200 and body["topology"]["roots"] == ["spine"]
        assert (await get(daemon.web_port, "/api/queue"))[0] == 200
        _ = jobs_pb2  # the API answers the proto messages' JSON


async def test_one_users_slow_calls_leave_slots_for_others(tmp_path: Path) -> None:
    async with running(_web_config(tmp_path, max_concurrent=4)) as daemon:  # a user holds at most one
        port = daemon.web_port
        assert port is not None
        entered, release = asyncio.Event(), asyncio.Event()
        real = daemon.views.get_job

        async def slow(ident: Any, job_id: str) -> Any:
            if ident.user == USER_A:
                entered.set()
                await release.wait()
            return await real(ident, job_id)

        daemon.views.get_job = slow  # type: ignore[method-assign]
        held = asyncio.ensure_future(get(port, "/api/jobs/1"))
        await asyncio.wait_for(entered.wait(), 10)  # alice's call holds her one slot
        status, body = await get(port, "/api/jobs/1")
        assert status == 503 and body["code"] == "UNAVAILABLE"
        assert (await get(port, "/api/whoami", user=USER_B))[0] == 200
        release.set()
        await held
        assert (await get(port, "/api/whoami"))[0] == 200  # her slot is free again
