"""Transport: the unix socket (who may connect, who may bind), TLS/mTLS on TCP, the CN -> user map,
plaintext TCP refused, and state on disk readable by the service alone."""

from __future__ import annotations

import asyncio
import grp
import http.server
import os
import pwd
import shutil
import ssl
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from clusterctl.client import ClusterClient
from clusterctl.errors import ServiceError, UsageError
from clusterctl.v1 import jobs_pb2
from clusterd.config import Config, ConfigError, SlurmConfig, TLSConfig
from clusterd.errors import SlurmError
from clusterd.main import main
from clusterd.security.transport import check_transport, is_loopback, parse_cn_map
from clusterd.server import ClusterDaemon
from clusterd.slurm.restd import _make_client
from clusterd.slurm.restd_http import HttpFailure
from tests.clusterd.conftest import USER_A, auth, base_config, code_of, command_request, running, stub
from tests.support.daemon import Daemon
from tests.support.privileges import needs_root
from tests.support.stack import Stack

from .pki import CA, Pair

TOKEN_A = auth(USER_A)[0][1].removeprefix("Bearer ")


@pytest.fixture
def pki(tmp_path: Path) -> tuple[CA, Pair]:
    ca = CA(tmp_path)
    return ca, ca.issue("localhost", server=True)


def tls_config(tmp_path: Path, server: Pair, **tls: str) -> Config:
    return replace(base_config(tmp_path), tls=TLSConfig(cert_file=str(server.cert), key_file=str(server.key), **tls))


async def call_list(addr: str, **client: str) -> list[jobs_pb2.JobStatus]:
    """The synchronous client in a thread: the server shares this event loop. One attempt: a refused
    handshake answers UNAVAILABLE at once instead of after the client's failover retries."""

    def go() -> list[jobs_pb2.JobStatus]:
        with ClusterClient(addr, client.pop("token", TOKEN_A), timeout=5, retry_seconds=0, **client) as c:
            return c.list_jobs()

    return await asyncio.to_thread(go)


async def test_tls_works_and_plaintext_to_a_tls_port_fails(tmp_path: Path, pki: tuple[CA, Pair]) -> None:
    ca, server = pki
    async with running(tls_config(tmp_path, server)) as daemon:
        assert await call_list(f"localhost:{daemon.port}", ca=str(ca.pem)) == []
        assert await call_list(f"127.0.0.1:{daemon.port}", ca=str(ca.pem)) == []
        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            code = await code_of(stub(ch).ListJobs(jobs_pb2.ListJobsRequest(), metadata=auth(USER_A), timeout=5))
        assert code == grpc.StatusCode.UNAVAILABLE
        other = CA(tmp_path, "other-ca")
        with pytest.raises(ServiceError) as info:
            await call_list(f"localhost:{daemon.port}", ca=str(other.pem))  # a server we do not trust
        assert info.value.code_name == "UNAVAILABLE"


async def test_client_reads_tls_settings_from_the_environment(
    tmp_path: Path, pki: tuple[CA, Pair], monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, server = pki
    monkeypatch.setenv("CLUSTERCTL_CA", str(ca.pem))
    async with running(tls_config(tmp_path, server)) as daemon:
        assert await call_list(f"localhost:{daemon.port}") == []
    monkeypatch.setenv("CLUSTERCTL_CERT", str(server.cert))
    with pytest.raises(UsageError, match="needs its key"):
        ClusterClient("localhost:1")


async def test_mtls_requires_a_client_certificate(tmp_path: Path, pki: tuple[CA, Pair]) -> None:
    ca, server = pki
    alice = ca.issue("alice-laptop")
    stranger_ca = CA(tmp_path, "stranger-ca")
    stranger = stranger_ca.issue("alice-laptop")
    cfg = tls_config(tmp_path, server, client_ca_file=str(ca.pem))
    async with running(cfg) as daemon:
        addr = f"localhost:{daemon.port}"
        with pytest.raises(ServiceError) as info:
            await call_list(addr, ca=str(ca.pem))  # no client certificate: the handshake fails
        assert info.value.code_name == "UNAVAILABLE"
        with pytest.raises(ServiceError) as info:
            await call_list(addr, ca=str(ca.pem), cert=str(stranger.cert), key=str(stranger.key))
        assert info.value.code_name == "UNAVAILABLE"
        # A certificate from our CA and a token: fine. The certificate alone is not an identity here.
        assert await call_list(addr, ca=str(ca.pem), cert=str(alice.cert), key=str(alice.key)) == []
        with pytest.raises(ServiceError) as info:
            await call_list(addr, ca=str(ca.pem), cert=str(alice.cert), key=str(alice.key), token="")
        assert info.value.code_name == "UNAUTHENTICATED"


async def test_cn_map_authenticates_without_a_token(tmp_path: Path, pki: tuple[CA, Pair]) -> None:
    ca, server = pki
    laptop, unmapped = ca.issue("nobody-laptop"), ca.issue("someone-else")
    cfg = tls_config(tmp_path, server, client_ca_file=str(ca.pem), cn_user_map="nobody-laptop=nobody")
    async with running(cfg) as daemon:
        addr = f"localhost:{daemon.port}"

        def submit(pair: Pair, token: str = "") -> str:
            with ClusterClient(addr, token, timeout=5, ca=str(ca.pem), cert=str(pair.cert), key=str(pair.key)) as c:
                return c.submit(command_request().spec).job.user

        assert await asyncio.to_thread(submit, laptop) == "nobody"
        with pytest.raises(ServiceError) as info:
            await asyncio.to_thread(submit, unmapped)
        assert info.value.code_name == "UNAUTHENTICATED"
        with pytest.raises(ServiceError) as info:  # a wrong token is not replaced by the certificate
            await asyncio.to_thread(submit, laptop, "wrong-token-wrong-token")
        assert info.value.code_name == "UNAUTHENTICATED"
    lines = daemon.audit.path.read_text().splitlines()  # whole once the daemon has closed it
    assert '"auth":"mtls"' in lines[0] and '"user":"nobody"' in lines[0]


@pytest.mark.parametrize(
    ("listen", "loop"),
    [
        ("127.0.0.1:50051", True),
        ("127.1.2.3:1", True),
        ("localhost:5", True),
        ("[::1]:5", True),
        ("unix:/run/clusterd.sock", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        (":50051", False),
        ("10.0.0.1:50051", False),
        ("login1.example.org:50051", False),
    ],
)
def test_loopback_detection(listen: str, loop: bool) -> None:
    assert is_loopback(listen) is loop


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "127.0.0.1:0", "localhost:0", "[::1]:0"])
def test_plaintext_tcp_is_refused_loopback_included(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], listen: str
) -> None:
    """A local user can bind a free loopback port while clusterd is down and collect tokens: TCP needs TLS."""
    cfg = replace(base_config(tmp_path), listen=listen, allow_insecure=False)
    with pytest.raises(ConfigError, match="refusing plaintext gRPC on TCP address"):
        ClusterDaemon(cfg)
    check_transport(replace(cfg, allow_insecure=True))  # the explicit escape hatch
    rc = main(["serve", "--listen", listen, "--tokens-file", cfg.tokens_file, "--state-dir", str(tmp_path / "s")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "refusing plaintext gRPC on TCP address" in err and "unix:/run/clusterd/clusterd.sock" in err
    assert not (tmp_path / "s").exists()  # refused before anything was created


@pytest.mark.parametrize(
    "tls",
    [
        TLSConfig(cert_file="/x.crt"),
        TLSConfig(client_ca_file="/ca.pem"),
        TLSConfig(cert_file="/x", key_file="/y", cn_user_map="a=b"),
        TLSConfig(cert_file="/x", key_file="/y", client_ca_file="/c", cn_user_map="novalue"),
    ],
)
def test_half_configured_tls_is_refused(tmp_path: Path, tls: TLSConfig) -> None:
    with pytest.raises(ConfigError):
        check_transport(replace(base_config(tmp_path), tls=tls))


def test_unreadable_certificate_is_a_config_error(tmp_path: Path) -> None:
    cfg = replace(base_config(tmp_path), tls=TLSConfig(cert_file=str(tmp_path / "no.crt"), key_file="/nope"))
    with pytest.raises(ConfigError, match="cannot read"):
        ClusterDaemon(cfg)


def test_cn_map_syntax() -> None:
    m = parse_cn_map("ci-runner=ci, ops-box = root:admin")
    assert m["ci-runner"].user == "ci" and not m["ci-runner"].admin
    assert m["ops-box"].user == "root" and m["ops-box"].admin


# ----------------------------------------------------------------- the unix socket, on the real stack

_PROBE = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.{op}(sys.argv[1])
except OSError as exc:
    print(type(exc).__name__)
else:
    print("ok")
"""

_READ = """
import sys
try:
    open(sys.argv[1], "rb").read()
except OSError as exc:
    print(type(exc).__name__)
else:
    print("ok")
"""

_LIST_JOBS = """
import grpc, sys
with grpc.insecure_channel("unix:" + sys.argv[1]) as ch:
    call = ch.unary_unary("/clusterctl.v1.JobService/ListJobs")
    try:
        call(b"", metadata=[("authorization", "Bearer " + sys.argv[2])], timeout=10)
    except grpc.RpcError as exc:
        print(exc.code().name)
    else:
        print("OK")
"""


def as_user(stack: Stack, user: str, code: str, *args: str) -> str:
    """Run ``code`` with the stack's job Python as Unix ``user``, with exactly that user's groups."""
    entry = pwd.getpwnam(user)
    proc = subprocess.run(
        [stack.env["CLUSTERCTL_JOB_PYTHON"], "-c", code, *args],
        capture_output=True,
        text=True,
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=os.getgrouplist(user, entry.pw_gid),
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A root-owned 0755 directory that every local user can traverse (unlike pytest's tmp_path)."""
    path = Path(tempfile.mkdtemp(prefix="clusterd-sock-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_only_the_socket_group_reaches_clusterd(stack: Stack, tmp_path: Path, open_dir: Path) -> None:
    """alice (in socket_group) calls clusterd; bob (not in it) cannot even connect; nobody can bind the
    path while clusterd is down, so nobody can stand in for it and collect tokens."""
    daemon = Daemon(stack, tmp_path / "state", socket_dir=open_dir / "run", socket_group="alice")
    daemon.start()
    try:
        sock = daemon.socket_path
        assert stat.S_IMODE(sock.stat().st_mode) == 0o660
        d = sock.parent.stat()
        assert stat.S_IMODE(d.st_mode) == 0o750 and d.st_uid == 0 and d.st_gid == grp.getgrnam("alice").gr_gid
        assert as_user(stack, "alice", _LIST_JOBS, str(sock), stack.tokens["alice"]) == "OK"
        assert as_user(stack, "bob", _PROBE.format(op="connect"), str(sock)) == "PermissionError"
        assert as_user(stack, "bob", _LIST_JOBS, str(sock), stack.tokens["bob"]) == "UNAVAILABLE"
    finally:
        daemon.stop()
    assert not sock.exists()
    for user in ("alice", "bob"):  # group member or not: the directory is writable by root alone
        assert as_user(stack, user, _PROBE.format(op="bind"), str(sock)) == "PermissionError"
    daemon.restart()  # and clusterd itself comes back on the same path
    daemon.stop()


def test_state_is_readable_by_the_service_alone(stack: Stack, tmp_path: Path, open_dir: Path) -> None:
    state = open_dir / "state"
    state.mkdir(mode=0o755)  # an existing, too open state dir is tightened
    daemon = Daemon(stack, state, socket_dir=open_dir / "run")
    daemon.start()
    try:
        with daemon.client() as client:
            client.list_jobs()
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        files = [p for p in state.iterdir() if p.name.startswith("clusterd.sqlite3") or p.name == "audit.log"]
        assert {p.name for p in files} >= {"clusterd.sqlite3", "audit.log"}
        for p in files:
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
        assert as_user(stack, "bob", _READ, str(state / "clusterd.sqlite3")) == "PermissionError"
    finally:
        daemon.stop()


def test_plaintext_tcp_refused_by_the_real_process(stack: Stack, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "clusterd.main",
            "serve",
            "--config",
            str(stack.dir / "clusterd.toml"),
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=stack.slurm_env(),
    )
    assert proc.returncode == 2 and "refusing plaintext gRPC on TCP address '127.0.0.1:0'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        pytest.param("foreign_dir", "belongs to uid", marks=needs_root("gives a directory to another user")),
        ("file_at_path", "is not a socket"),
        ("no_group", "does not exist"),
        ("abstract", "abstract unix sockets"),
        ("relative", "must be absolute"),
    ],
)
def test_unsafe_socket_settings_are_refused(tmp_path: Path, setup: str, message: str) -> None:
    sock = tmp_path / "run" / "clusterd.sock"
    cfg = replace(base_config(tmp_path), listen=f"unix:{sock}", socket_group="", allow_insecure=False)
    if setup == "foreign_dir":  # pre-created by another user, who could swap the socket
        sock.parent.mkdir()
        os.chown(sock.parent, pwd.getpwnam("bob").pw_uid, -1)
    elif setup == "file_at_path":
        sock.parent.mkdir()
        sock.write_text("")
    elif setup == "no_group":
        cfg = replace(cfg, socket_group="no-such-group-xyz")
    elif setup == "abstract":
        cfg = replace(cfg, listen="unix-abstract:clusterd")
    else:
        cfg = replace(cfg, listen="unix:run/clusterd.sock")
    with pytest.raises(ConfigError, match=message):
        ClusterDaemon(cfg)


async def test_second_clusterd_does_not_take_over_a_live_socket(tmp_path: Path) -> None:
    cfg = replace(base_config(tmp_path), listen=f"unix:{tmp_path / 'run' / 'clusterd.sock'}", socket_group="")
    async with running(cfg):
        with pytest.raises(ConfigError, match="another process is listening"):
            ClusterDaemon(replace(cfg, state_dir=str(tmp_path / "other")))


# ----------------------------------------------------------------- clusterd -> slurmrestd


@pytest.fixture
def https_server(pki: tuple[CA, Pair]) -> Iterator[str]:
    """A TLS HTTP server with the test CA's localhost certificate (answers 404 to everything)."""
    _, pair = pki
    httpd = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pair.cert, pair.key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"https://localhost:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


async def test_restd_https_is_verified_against_restd_ca_file(
    tmp_path: Path, pki: tuple[CA, Pair], https_server: str
) -> None:
    ca, _ = pki
    client = _make_client(https_server, 5, ca_file=str(ca.pem))
    try:  # TLS verified, then an HTTP answer
        assert (await client.request("GET", "/openapi/v3", headers={})).status in (404, 501)
    finally:
        await client.aclose()
    client = _make_client(https_server, 5, ca_file=str(CA(tmp_path, "other-ca").pem))
    try:
        with pytest.raises(HttpFailure, match="CERTIFICATE_VERIFY_FAILED"):
            await client.request("GET", "/openapi/v3", headers={})
    finally:
        await client.aclose()
    with pytest.raises(SlurmError, match="is not https"):
        _make_client("http://127.0.0.1:6820", 5, ca_file=str(ca.pem))


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://10.0.0.5:6820", True),
        ("http://restd.example.org:6820", True),
        ("http://127.0.0.1:6820", False),
        ("http://[::1]:6820", False),
        ("https://10.0.0.5:6820", False),
        ("unix:///run/slurmrestd.sock", False),
    ],
)
@pytest.mark.parametrize("backend", ["slurmrestd", "auto"])  # auto with a restd_url is slurmrestd
def test_plain_http_to_a_remote_slurmrestd_is_refused(
    tmp_path: Path, url: str, refused: bool, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = replace(
        base_config(tmp_path),
        allow_insecure=False,
        listen=f"unix:{tmp_path / 'run' / 's.sock'}",
        slurm=SlurmConfig(backend=backend, restd_url=url, jwt_token_file="/x"),
    )
    if refused:
        with pytest.raises(ConfigError, match="plain HTTP to another host sends every user's JWT in clear"):
            check_transport(cfg)
        check_transport(replace(cfg, allow_insecure=True))
        assert "allow_insecure: slurm.restd_url" in caplog.text
    else:
        check_transport(cfg)
        assert ("plain HTTP on loopback" in caplog.text) == url.startswith("http://")
