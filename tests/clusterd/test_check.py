"""``clusterd check``: each misconfiguration is reported by name, and nothing stops the other checks."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from clusterctl.storage import MemoryStorage
from clusterctl.storage.base import Buffer
from clusterd.check import FAIL, OK, WARN, Finding, Findings, check_storage, conditional_put_refusal, run_checks
from clusterd.main import main
from clusterd.slurm.fake import FakeSlurm
from tests.support.s3server import S3_SERVERS, get_server

from .conftest import write_tokens


def write_config(tmp_path: Path, extra: str = "", *, bin_dir: Path | None = None) -> Path:
    tokens = tmp_path / "tokens.toml"
    if not tokens.exists():
        write_tokens(tokens)
        tokens.chmod(0o600)
    cfg = tmp_path / "clusterd.toml"
    cfg.write_text(
        f'listen = "unix:{tmp_path / "run" / "clusterd.sock"}"\nsocket_group = ""\n'
        f'state_dir = "{tmp_path / "state"}"\ntokens_file = "{tokens}"\n{extra}\n'
        f'[slurm]\njob_root = "{tmp_path / "jobs"}"\nbin_dir = "{bin_dir or tmp_path / "nobin"}"\n'
    )
    return cfg


def by_check(findings: list) -> dict[str, list[tuple[str, str]]]:  # type: ignore[type-arg]
    out: dict[str, list[tuple[str, str]]] = {}
    for f in findings:
        out.setdefault(f.check, []).append((f.status, f.detail))
    return out


async def test_good_config_passes_with_fake_slurm(tmp_path: Path) -> None:
    findings = await run_checks(str(write_config(tmp_path)), [], backend=FakeSlurm.cluster())
    got = by_check(findings)
    assert not findings.failed, findings
    assert got["slurm"][0][0] == OK and "partitions" in got["slurm"][0][1]
    assert got["slurm"][0][1].startswith("Slurm 22.05.8 (JSON/REST v0.0.38) via commands")
    assert got["tokens"] == [(WARN, got["tokens"][0][1]), (OK, "3 tokens for 3 users (1 admin)")]  # plaintext
    assert not (tmp_path / "state").exists()  # check changes nothing


async def test_check_names_the_backend_auto_chose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERD_SLURM__BACKEND", "auto")
    got = by_check(await run_checks(str(write_config(tmp_path)), [], backend=FakeSlurm.cluster()))
    assert got["slurm"][0][1].startswith("Slurm 22.05.8 (JSON/REST v0.0.38) via commands (auto): ")


async def test_every_problem_is_named_and_all_checks_still_run(tmp_path: Path) -> None:
    (tmp_path / "tokens.toml").write_text('[[token]]\nuser = "no-such-user-xyz"\ntoken_sha256 = "' + "0" * 64 + '"\n')
    extra = 'metrics_listen = "nohost"\n[tls]\ncert_file = "/nonexistent/cert.pem"\nkey_file = "/nonexistent/key.pem"'
    findings = await run_checks(str(write_config(tmp_path, extra)), [])
    got = by_check(findings)
    assert findings.failed
    assert got["config"] == [(FAIL, "metrics_listen must be host:port, got 'nohost'")]
    assert got["tls"][0][0] == FAIL and "tls.key_file /nonexistent/key.pem" in got["tls"][0][1]
    assert got["tokens"][0][0] == FAIL and "no Unix account for no-such-user-xyz" in got["tokens"][0][1]
    # Slurm binaries missing from bin_dir: unreachable, said so with the command that failed.
    assert got["slurm"][0][0] == FAIL and "sbatch" in got["slurm"][0][1] and "not found" in got["slurm"][0][1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("listen = [", "not valid TOML"),
        ("bogus_key = 1", "unknown config key 'bogus_key'"),
        ("poll_interval_seconds = 'soon'", "poll_interval_seconds: expected float"),
        ('log_format = "xml"', "log_format must be json or text"),
    ],
)
def test_cli_reports_config_errors_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text + "\n")
    assert main(["check", "--config", str(cfg)]) == 1
    out = capsys.readouterr()
    assert expected in out.out and "Traceback" not in out.out + out.err
    assert "FAILED" in out.err


def test_cli_json_and_bad_tokens_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tokens.toml").write_text("[[token]]\nuser = 'x'\n")
    cfg = write_config(tmp_path)
    assert main(["check", "--config", str(cfg), "--json"]) == 1
    findings = json.loads(capsys.readouterr().out)
    tokens = [f for f in findings if f["check"] == "tokens"]
    assert tokens == [
        {
            "check": "tokens",
            "status": "FAIL",
            "detail": f"{tmp_path / 'tokens.toml'}: token #1: give exactly one of 'token_sha256' "
            "(preferred) or 'token'",
        }
    ]


def test_storage_probe_reports_the_uri(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    missing = tmp_path / "missing" / "deeper"
    os.environ.pop("CLUSTERD_CONFIG", None)
    cfg = write_config(tmp_path)
    main(["check", "--config", str(cfg), "--storage-uri", f"file://{ckpt}", "--storage-uri", f"file://{missing}"])
    out = capsys.readouterr().out
    assert f"ok    storage  file://{ckpt}: readable, newest committed step none" in out
    assert f"file://{missing}" in out


async def test_transport_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing socket group FAILs; http:// to slurmrestd: another host FAILs, loopback is warned about."""
    cfg = str(write_config(tmp_path))

    async def run(**env: str) -> dict[str, list[tuple[str, str]]]:
        for key, value in env.items():
            monkeypatch.setenv(f"CLUSTERD_{key}", value)
        return by_check(await run_checks(cfg, [], backend=FakeSlurm.cluster()))

    got = await run(SOCKET_GROUP="no-such-group-xyz")
    assert got["socket"][0][0] == FAIL and "groupadd no-such-group-xyz" in got["socket"][0][1]
    got = await run(SOCKET_GROUP="root")
    sock = tmp_path / "run" / "clusterd.sock"
    assert got["socket"] == [(OK, f"{sock}: for group root (0 listed members); {sock.parent} will be created 0750")]
    got = await run(SLURM__BACKEND="slurmrestd", SLURM__RESTD_URL="http://10.0.0.5:6820", SLURM__JWT_TOKEN_FILE="/x")
    assert got["tls"][0][0] == FAIL and "plain HTTP to another host" in got["tls"][0][1]
    got = await run(SLURM__RESTD_URL="http://127.0.0.1:6820")
    assert got["slurmrestd"][0][0] == WARN and "plain HTTP on loopback" in got["slurmrestd"][0][1]
    got = await run(SLURM__RESTD_URL="https://restd.example.org:6820")
    assert "slurmrestd" not in got and "tls" not in got and got["socket"][0][0] == OK


def test_plaintext_tcp_fails_the_check_unless_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    text = cfg.read_text().replace(f'listen = "unix:{tmp_path / "run" / "clusterd.sock"}"', 'listen = "127.0.0.1:1"')
    cfg.write_text(text)
    assert main(["check", "--config", str(cfg), "--json"]) == 1
    tls = [f for f in json.loads(capsys.readouterr().out) if f["check"] == "tls"]
    assert tls[0]["status"] == FAIL and "refusing plaintext gRPC on TCP address" in tls[0]["detail"]
    cfg.write_text("allow_insecure = true\n" + text)
    main(["check", "--config", str(cfg), "--json"])
    tls = [f for f in json.loads(capsys.readouterr().out) if f["check"] == "tls"]
    assert tls == [
        {
            "check": "tls",
            "status": WARN,
            "detail": "allow_insecure: plaintext gRPC on TCP 127.0.0.1:1: tokens are exposed",
        }
    ]


@pytest.mark.s3
@pytest.mark.parametrize("s3", S3_SERVERS)
def test_s3_conditional_put_probe(s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each real server enforces If-None-Match: * (OK, probe object removed); one that ignores it is a FAIL."""
    server = get_server(s3)
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    prefix = f"check-probe/{uuid.uuid4().hex}"
    out = Findings()
    check_storage([f"s3://{server.bucket}/{prefix}"], out)
    assert out == [
        Finding(
            "storage",
            OK,
            f"s3://{server.bucket}/{prefix}: readable, newest committed step none, If-None-Match enforced",
        )
    ]
    assert server.client().list_objects_v2(Bucket=server.bucket, Prefix=prefix).get("KeyCount", 0) == 0

    class IgnoresIfNoneMatch(MemoryStorage):
        def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
            super().put(key, data)

    ignoring = IgnoresIfNoneMatch()
    refusal = conditional_put_refusal(ignoring)
    assert refusal is not None and "expected 412" in refusal
    assert ignoring.list_objects("") == []


async def test_job_root_inside_the_private_state_dir_fails(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    jobs = tmp_path / "state" / "jobs"
    cfg.write_text(cfg.read_text().replace(f'job_root = "{tmp_path / "jobs"}"', f'job_root = "{jobs}"'))
    got = by_check(await run_checks(str(cfg), [], backend=FakeSlurm.cluster()))
    assert got["paths"][0][0] == FAIL and "is inside state_dir" in got["paths"][0][1]


async def test_tcp_heartbeats_need_a_ca_the_jobs_can_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks dialing TCP carry their job's token: plaintext is warned about, TLS without a CA for the
    jobs FAILs, and the CA's path reaches the jobs' environment as CLUSTERCTL_CA."""
    from clusterd.config import LivenessConfig
    from clusterd.liveness import credentials
    from clusterd.model.spec import JobSpec

    cfg = str(write_config(tmp_path))
    monkeypatch.setenv("CLUSTERD_LIVENESS__HEARTBEAT_ADDR", "clusterd-a:50051,clusterd-b:50051")
    got = by_check(await run_checks(cfg, [], backend=FakeSlurm.cluster()))
    assert got["heartbeats"][0][0] == WARN and "plaintext" in got["heartbeats"][0][1]
    monkeypatch.setenv("CLUSTERD_TLS__CERT_FILE", "/nonexistent/cert.pem")
    monkeypatch.setenv("CLUSTERD_TLS__KEY_FILE", "/nonexistent/key.pem")
    got = by_check(await run_checks(cfg, [], backend=FakeSlurm.cluster()))
    assert got["heartbeats"][0][0] == FAIL and "heartbeat_ca_file" in got["heartbeats"][0][1]
    monkeypatch.setenv("CLUSTERD_LIVENESS__HEARTBEAT_CA_FILE", "/shared/clusterd-ca.pem")
    got = by_check(await run_checks(cfg, [], backend=FakeSlurm.cluster()))
    assert got["heartbeats"][0][0] == OK
    live = LivenessConfig(heartbeat_addr="clusterd-a:50051", heartbeat_ca_file="/shared/clusterd-ca.pem")
    env, _ = credentials.issue(JobSpec(), live, "unix:/run/clusterd.sock")
    assert env["CLUSTERCTL_CA"] == "/shared/clusterd-ca.pem"
