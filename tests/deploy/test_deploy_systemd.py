"""deploy/systemd: the sample config loads and stays complete, the unit parses and lets it write.

No systemd runs as PID 1 where these tests run, so the unit is checked with ``systemd-analyze
verify`` (offline) and by reading it, never started.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest

from clusterd.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
UNIT = SYSTEMD / "clusterd.service"
EXAMPLE = SYSTEMD / "clusterd.toml.example"
CLUSTERD = ROOT / ".venv" / "bin" / "clusterd"


def config_keys(cls: type = Config, section: str = "") -> set[str]:
    """Every key clusterd knows, dotted by section (``slurm.backend``)."""
    out: set[str] = set()
    for f in fields(cls):
        default = getattr(cls(), f.name)
        if is_dataclass(default):
            out |= config_keys(type(default), f"{f.name}.")
        else:
            out.add(f"{section}{f.name}")
    return out


def example_keys() -> set[str]:
    """Keys the sample mentions, set or commented out (``# key = default``), dotted by section."""
    out, section = set(), ""
    for line in EXAMPLE.read_text().splitlines():
        if m := re.match(r"^\[(\w+)\]\s*$", line):
            section = f"{m.group(1)}."
        elif m := re.match(r"^(?:# )?(\w+) = \S", line):
            out.add(f"{section}{m.group(1)}")
    return out


def unit_values(key: str) -> list[str]:
    return [line.split("=", 1)[1].strip() for line in UNIT.read_text().splitlines() if line.startswith(f"{key}=")]


def test_example_loads_with_the_real_loader() -> None:
    cfg = load_config(EXAMPLE, environ={})
    assert cfg.listen == "0.0.0.0:50051" and not cfg.allow_insecure
    assert cfg.tls.cert_file and cfg.tls.key_file, "a non-loopback listen needs TLS"
    assert cfg.tokens_file == "/etc/clusterd/tokens.toml" and cfg.state_dir == "/var/lib/clusterd"
    assert cfg.metrics_listen.startswith("127.0.0.1:") and cfg.log_format == "json"


def test_example_lists_every_key_and_only_known_ones() -> None:
    mentioned, known = example_keys(), config_keys()
    assert not known - mentioned, f"clusterd.toml.example does not mention {sorted(known - mentioned)}"
    assert not mentioned - known, f"clusterd.toml.example mentions unknown keys {sorted(mentioned - known)}"


def test_commented_defaults_are_the_real_defaults() -> None:
    """Uncommenting every ``# key = value`` line of the sample must change nothing."""
    data = tomllib.loads(re.sub(r"(?m)^# (\w+ = \S)", r"\1", EXAMPLE.read_text()))
    base = load_config(EXAMPLE, environ={})
    for name, value in data.items():
        pairs = (
            [(f"{name}.{k}", getattr(getattr(base, name), k), v) for k, v in value.items()]
            if isinstance(value, dict)
            else [(name, getattr(base, name), value)]
        )
        for key, have, want in pairs:
            assert have == (tuple(want) if isinstance(want, list) else want), f"{key}: sample {want!r}, loaded {have!r}"


def test_unit_runs_the_configured_service_as_root() -> None:
    assert unit_values("Type") == ["exec"], "clusterd does not speak sd_notify"
    assert unit_values("User") == ["root"], "sbatch --uid needs root"
    (exec_start,) = unit_values("ExecStart")
    assert exec_start == "/opt/clusterd/venv/bin/clusterd serve --config /etc/clusterd/clusterd.toml"
    assert "CLUSTERD_CONFIG=/etc/clusterd/clusterd.toml" in unit_values("Environment")
    for key, want in {
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "Restart": "on-failure",
    }.items():
        assert unit_values(key) == [want], key


def test_sandbox_lets_the_service_write_what_the_sample_config_names() -> None:
    writable = [p.lstrip("-") for v in unit_values("ReadWritePaths") for p in v.split()]
    state_dirs = [f"/var/lib/{d}" for v in unit_values("StateDirectory") for d in v.split()]
    cfg = load_config(EXAMPLE, environ={})
    for path in (cfg.state_dir, str(cfg.audit_path), cfg.slurm.job_root):
        assert any(path == w or path.startswith(w.rstrip("/") + "/") for w in writable + state_dirs), (
            f"{path} is read-only under ProtectSystem=strict: add it to ReadWritePaths"
        )


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed (apt install systemd)")
    if not CLUSTERD.exists():
        pytest.skip(f"{CLUSTERD} missing: verify needs an executable ExecStart (scripts/bootstrap.sh makes it)")
    # /opt/clusterd does not exist here: point ExecStart at this checkout's clusterd, change nothing else.
    unit = tmp_path / "clusterd.service"
    unit.write_text(UNIT.read_text().replace("/opt/clusterd/venv/bin/clusterd", str(CLUSTERD)))
    proc = subprocess.run([exe, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if "clusterd.service" in line]
    assert proc.returncode == 0 and not ours, proc.stdout + proc.stderr


def test_logrotate_snippet_parses(tmp_path: Path) -> None:
    exe = shutil.which("logrotate")
    if exe is None:
        pytest.skip("logrotate is not installed (apt install logrotate)")
    conf = tmp_path / "clusterd"
    conf.write_text((SYSTEMD / "clusterd.logrotate").read_text())
    conf.chmod(0o644)
    # -d: debug, rotates nothing; its own state file so the system's is not read or written.
    proc = subprocess.run(
        [exe, "-d", "-s", str(tmp_path / "state"), str(conf)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "error" not in proc.stderr.lower(), proc.stderr
    audit = str(load_config(EXAMPLE, environ={}).audit_path)
    assert audit in conf.read_text(), f"the snippet does not rotate the sample's audit log {audit}"
