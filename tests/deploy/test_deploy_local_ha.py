"""deploy/local's HA pieces without the stack: replica configs, the restart supervisor, kill-leader.

The real thing (PostgreSQL, two clusterd replicas, a failover) needs root and the host stack; what
these check in a few seconds is the shell around it: each replica's rendered config, that
lib/supervise.sh brings a SIGKILLed command back and stops it on TERM, and that ``stack.sh
kill-leader`` / ``freeze-leader`` pick the replica whose /healthz says leader (fake replicas here).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tests.support.privileges import needs_root
from tests.support.wait import wait_for

FAULT_HOOKS = needs_root("stack.sh's fault hooks run as root")

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "deploy" / "local"
STACK = LOCAL / "stack.sh"
SUPERVISE = LOCAL / "lib" / "supervise.sh"
REPLICAS = ("clusterd-a", "clusterd-b")


def bash_lib(state: Path, script: str, **env: str) -> str:
    """Run ``script`` after sourcing the stack's libraries with the state dir ``state``."""
    prelude = "set -euo pipefail; " + " ".join(
        f'source "$STACK_HOME/lib/{f}";' for f in ("common.sh", "jobenv.sh", "clusterd.sh", "ha.sh")
    )
    env = {"PATH": "/usr/bin:/bin", "STACK_HOME": str(LOCAL), "CLUSTERCTL_STACK_DIR": str(state), **env}
    proc = subprocess.run(["bash", "-c", f"{prelude} {script}"], capture_output=True, text=True, timeout=30, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_replica_configs_differ_only_where_they_must(tmp_path: Path) -> None:
    out = bash_lib(
        tmp_path,
        'mkdir -p "$LOGS"; for r in "${REPLICAS[@]}"; do write_replica_config "$r"; done; ha_addrs; ha_env_lines',
    )
    addrs, *env_lines = out.splitlines()
    configs = {r: tomllib.loads((tmp_path / f"{r}.toml").read_text()) for r in REPLICAS}
    a, b = configs.values()
    for key in ("listen", "metrics_listen", "state_dir"):
        assert a[key] != b[key], f"both replicas have {key} = {a[key]}"
    for key in ("tokens_file", "store", "ha", "liveness", "slurm", "socket_group"):
        assert a[key] == b[key], key
    assert a["metrics_listen"] == "127.0.0.1:9464" and b["metrics_listen"] == "127.0.0.1:9465"
    assert a["store"]["url"] == f"postgresql:///clusterd?host={tmp_path}/run/postgres&user=root"
    assert a["ha"]["replica_name"] == "", "a restarted replica must be a new lease holder"
    assert addrs.split(",") == [c["listen"] for c in configs.values()] == a["liveness"]["heartbeat_addr"].split(",")
    assert all(c["listen"].startswith(f"unix:{tmp_path}/run/") for c in configs.values())
    assert "export CLUSTERCTL_HA=1" in env_lines
    assert f"export CLUSTERCTL_STORE_URL='{a['store']['url']}'" in env_lines  # quoted: the url has '&'


def test_supervise_restarts_a_killed_command_and_stops_it_on_term(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    sup = subprocess.Popen(
        ["bash", str(SUPERVISE), "t", str(pidfile), "--", "sleep", "300"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, 0.05, "the first start"))
        os.kill(first, signal.SIGKILL)
        t0 = time.monotonic()
        second = int(wait_for(lambda: (p := pidfile.read_text().strip()) != str(first) and p, 10, 0.05, "a restart"))
        assert time.monotonic() - t0 < 3, "Restart=always with a 0.5 s pause"
        sup.terminate()
        assert sup.wait(10) == 0
        assert not pidfile.exists()
        with pytest.raises(ProcessLookupError):
            os.kill(second, 0)
    finally:
        sup.kill()
    log = sup.stderr.read() if sup.stderr else ""
    assert f"pid {first} killed by signal 9" in log and f"stopping pid {second}" in log


class FakeReplica:
    """A process named ``clusterd`` (a copy of sleep) and an HTTP /healthz that reports ``role``."""

    def __init__(self, bindir: Path, pidfile: Path, port: int, role: str) -> None:
        exe = bindir / "clusterd"
        if not exe.exists():
            shutil.copy("/bin/sleep", exe)
        self.proc = subprocess.Popen([str(exe), "300"])
        pidfile.write_text(f"{self.proc.pid}\n")
        body = json.dumps({"role": role, "replica": f"host:{self.proc.pid}", "epoch": 4}).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200 if self.path == "/healthz" else 404)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.http = HTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(5)


@pytest.fixture
def fake_ha(tmp_path: Path) -> Iterator[tuple[Path, int, dict[str, FakeReplica]]]:
    """A state dir recorded as HA, with clusterd-a a follower and clusterd-b the leader."""
    (tmp_path / "run").mkdir()
    (tmp_path / "ha").touch()
    for _ in range(20):  # two neighbouring free ports: replica i listens on base + i
        probe = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        base = probe.server_address[1]
        probe.server_close()
        try:
            replicas = {
                r: FakeReplica(tmp_path, tmp_path / "run" / f"{r}.pid", base + i, ("follower", "leader")[i])
                for i, r in enumerate(REPLICAS)
            }
            break
        except OSError:
            continue
    else:
        pytest.fail("no two neighbouring free ports")
    try:
        yield tmp_path, base, replicas
    finally:
        for r in replicas.values():
            r.close()


def stack(state: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CLUSTERCTL_STACK_DIR": str(state),
        "CLUSTERCTL_METRICS_PORT": str(port),
        "CLUSTERCTL_STACK_TIMEOUT": "5",
        "CLUSTERCTL_SLURM": "22.05",
    }
    return subprocess.run(["bash", str(STACK), *args], capture_output=True, text=True, timeout=30, env=env)


@FAULT_HOOKS
def test_kill_leader_sigkills_the_replica_whose_healthz_says_leader(
    fake_ha: tuple[Path, int, dict[str, FakeReplica]],
) -> None:
    state, port, replicas = fake_ha
    done = stack(state, port, "kill-leader")
    assert done.returncode == 0, done.stderr
    leader = replicas["clusterd-b"].proc
    assert done.stdout.split() == ["clusterd-b", str(leader.pid)]
    assert leader.wait(5) == -signal.SIGKILL
    assert replicas["clusterd-a"].proc.poll() is None, "the follower is left alone"


@FAULT_HOOKS
def test_freeze_leader_stops_and_continues_it(fake_ha: tuple[Path, int, dict[str, FakeReplica]]) -> None:
    state, port, replicas = fake_ha
    leader = replicas["clusterd-b"].proc
    env = {**os.environ, "CLUSTERCTL_STACK_DIR": str(state), "CLUSTERCTL_METRICS_PORT": str(port)}
    freezer = subprocess.Popen(
        ["bash", str(STACK), "freeze-leader", "1.5"], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )

    def state_of(pid: int) -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    wait_for(lambda: state_of(leader.pid) == "T", 10, 0.05, "the leader stopped")
    out, err = freezer.communicate(timeout=20)
    assert freezer.returncode == 0, err
    assert out.split() == ["clusterd-b", str(leader.pid)]
    assert state_of(leader.pid) != "T" and leader.poll() is None


@FAULT_HOOKS
def test_fault_hooks_refuse_a_stack_that_is_not_ha(tmp_path: Path) -> None:
    done = stack(tmp_path, 9464, "kill-leader")
    assert done.returncode != 0 and "up --ha" in done.stderr
