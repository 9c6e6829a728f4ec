"""The documented examples, run as written against the local stack: docs/operator-guide.md's
operator blocks, README.md's first job and first checkpoint.

Blocks marked ``<!-- readme-test: GROUP -->`` run in order: ``operator`` (install, tokens, TLS,
check), then clusterd is started the way the systemd unit starts it, then ``user`` (submit, wait,
list and verify checkpoints) with the token and CA the operator part made, then ``operations``
(scrape /metrics). A block marked ``file=NAME`` is written to the working directory instead.

What is changed, and only this: ``/etc/clusterd``, ``/opt/clusterd``, ``/var/lib/clusterd`` and
``/shared/clusterd`` move under a temporary root, in the blocks and in the sample config
(``/opt/clusterd/src`` is a copy of this checkout's files); the metrics port is a free one; the
service's listen address and its jobs' PATH come from ``CLUSTERD_*`` variables (the sample binds
0.0.0.0:50051, where the stack's own clusterd listens, and jobs here need the stack's job Python).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.stack import Stack

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/operator-guide.md")  # the files whose marked blocks run, in this order
_BLOCK = re.compile(r"<!-- readme-test: (\w+)(?: file=([\w.]+))? -->\n```(\w+)\n(.*?)```", re.S)


def readme_blocks() -> list[tuple[str, str | None, str]]:
    """(group, file name or None, code) for every marked block, in the order of DOCS and of each file."""
    return [(g, f, code) for doc in DOCS for g, f, _, code in _BLOCK.findall((REPO / doc).read_text())]


def test_readme_marks_the_examples() -> None:
    groups = [(g, f) for g, f, _ in readme_blocks()]
    assert ("operator", "") in groups and ("user", "") in groups and ("user", "train_min.py") in groups
    assert ("operations", "") in groups


class Sandbox:
    def __init__(self, stack: Stack) -> None:
        # Under /tmp and world-traversable: jobs run as alice and read train_min.py from here.
        self.root = Path(tempfile.mkdtemp(prefix="clusterctl-readme-", dir="/tmp"))
        self.root.chmod(0o755)
        self.work = self.root / "work"
        self.work.mkdir(mode=0o755)
        # README's first job runs from alice's own directory, as she would: the job writes its
        # slurm-%j.out there, with her rights (as under sbatch).
        alice = pwd.getpwnam("alice")
        os.chown(self.work, alice.pw_uid, alice.pw_gid)
        self.port, self.metrics_port = free_port(), free_port()
        src = self.root / "opt" / "clusterd" / "src"
        listed = (
            subprocess.run(
                ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                cwd=REPO,
                capture_output=True,
                check=True,
            )
            .stdout.decode()
            .split("\0")
        )
        for name in filter(None, listed):
            if (REPO / name).is_file():
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, src / name)
        sample = src / "deploy" / "systemd" / "clusterd.toml.example"
        sample.write_text(self.rewrite(sample.read_text()))
        (self.root / "etc").mkdir()
        (self.root / "var" / "lib").mkdir(parents=True)
        job_python = Path(stack.env["CLUSTERCTL_JOB_PYTHON"])
        # The user's Python: a client install alice can run (the operator's venv under this root-made
        # tree links to root's interpreter). Like sbatch, the job inherits the user's PATH.
        self.user_bin = job_python.parent
        aws = {k: v for k, v in stack.env.items() if k.startswith("AWS_")}
        self.env = {
            **stack.slurm_env(),
            **aws,
            "CLUSTERD_LISTEN": f"127.0.0.1:{self.port}",
            "CLUSTERD_SLURM__JOB_PATH": f"{job_python.parent}:/usr/bin:/bin",
        }
        self.env.pop("CLUSTERD_CONFIG", None)

    def rewrite(self, code: str) -> str:
        for path in ("/etc/clusterd", "/opt/clusterd", "/var/lib/clusterd", "/shared/clusterd"):
            code = code.replace(path, f"{self.root}{path}")
        return code.replace("127.0.0.1:9464", f"127.0.0.1:{self.metrics_port}")

    def run(self, group: str, env: dict[str, str] | None = None, timeout: int = 600) -> str:
        script = ""
        for g, name, code in readme_blocks():
            if g != group:
                continue
            if name:
                (self.work / name).write_text(code)
            else:
                script += self.rewrite(code) + "\n"
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=self.work,
            capture_output=True,
            text=True,
            env=env or self.env,
            timeout=timeout,
        )
        assert proc.returncode == 0, (
            f"documented {group} block failed:\n{script}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-4000:]}"
        )
        return proc.stdout


@pytest.fixture
def sandbox(stack: Stack) -> Iterator[Sandbox]:
    box = Sandbox(stack)
    try:
        yield box
    finally:
        shutil.rmtree(box.root, ignore_errors=True)


def test_operator_then_user_examples_work_as_written(sandbox: Sandbox) -> None:
    out = sandbox.run("operator")
    assert "alice" in out and "Slurm 22.05" in out
    venv = sandbox.root / "opt" / "clusterd" / "venv" / "bin"
    etc = sandbox.root / "etc" / "clusterd"
    # What the systemd unit's ExecStart runs.
    log = (sandbox.root / "clusterd.log").open("wb")
    serve = subprocess.Popen(
        [str(venv / "clusterd"), "serve", "--config", str(etc / "clusterd.toml")],
        stdout=log,
        stderr=log,
        env=sandbox.env,
    )
    try:
        user_env = {
            **sandbox.env,
            "PATH": f"{sandbox.user_bin}:{venv}:{os.environ['PATH']}",
            "CLUSTERCTL_ADDR": f"localhost:{sandbox.port}",
            "CLUSTERCTL_TOKEN": (sandbox.work / "alice.token").read_text().strip(),
            "CLUSTERCTL_CA": str(etc / "tls.crt"),
        }
        deadline = time.monotonic() + 60
        while subprocess.run([str(venv / "clusterctl"), "nodes"], env=user_env, capture_output=True).returncode:
            assert serve.poll() is None and time.monotonic() < deadline, (sandbox.root / "clusterd.log").read_text()
            time.sleep(0.5)
        out = sandbox.run("user", env=user_env)
        assert "COMPLETED" in out and "readme-train" in out
        metrics = sandbox.run("operations")
        assert 'clusterd_rpcs_total{code="OK",method="JobService/SubmitJob"} 1.0' in metrics
        logs = (sandbox.root / "clusterd.log").read_text()
        assert '"message": "slurm sbatch ok"' in logs and '"user": "alice"' in logs
    finally:
        serve.terminate()
        serve.wait(30)
        log.close()
