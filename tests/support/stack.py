"""The local stack (deploy/local/stack.sh up) as tests and benches see it: its env file and helpers."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from .paths import ROOT

HOST_STACK_DIR = Path("/var/lib/clusterctl-stack")  # the 22.05 stack (the host's Slurm packages)
STACK_DIR = Path(os.environ.get("CLUSTERCTL_STACK_DIR", str(HOST_STACK_DIR)))


def stack_dir_for(version: str | None) -> Path:
    """The state dir of ``deploy/local/stack.sh up --slurm VERSION`` (None: the suite's, STACK_DIR)."""
    if version is None:
        return STACK_DIR
    return HOST_STACK_DIR if version == "22.05" else Path(f"{HOST_STACK_DIR}-{version}")


def read_env_file(path: Path) -> dict[str, str]:
    """The ``export NAME=value`` lines of a shell env file (values shell-unquoted)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^export ([A-Z_][A-Z0-9_]*)=(.*)$", line.strip())
        if m:
            env[m.group(1)] = shlex.split(m.group(2))[0] if m.group(2) else ""
    return env


@dataclass
class Stack:
    """The running stack: its directory and the variables of its env file."""

    dir: Path
    env: dict[str, str]

    @classmethod
    def load(cls, directory: Path = STACK_DIR) -> Stack:
        """The stack in ``directory``; FileNotFoundError when it is not up."""
        return cls(directory, read_env_file(directory / "env"))

    @property
    def tokens(self) -> dict[str, str]:
        return {
            "alice": self.env["CLUSTERCTL_TOKEN"],
            "bob": self.env["CLUSTERCTL_TOKEN_BOB"],
            "root": self.env["CLUSTERCTL_TOKEN_ADMIN"],
        }

    @property
    def slurm_conf(self) -> str:
        return self.env.get("SLURM_CONF", "/etc/slurm/slurm.conf")

    @property
    def slurm_version(self) -> str:
        """The release the stack runs (``stack.sh up --slurm VER``); stacks before versions ran 22.05."""
        return self.env.get("CLUSTERCTL_SLURM_VERSION", "22.05")

    @property
    def slurm_bin(self) -> str:
        """Where this release's sbatch & co are (wrappers into its chroot); "" = the host's, on PATH."""
        return self.env.get("CLUSTERCTL_SLURM_BIN", "")

    def netns(self, node: str) -> str:
        """The network namespace of Slurm node ``node`` (a chroot release's stack prefixes it: s2411-node2)."""
        version = self.slurm_version
        return node if version == "22.05" else f"s{version.replace('.', '')}-{node}"

    def command_path(self, base: str = "/usr/bin:/bin") -> str:
        """A PATH whose Slurm commands are this stack's release."""
        return f"{self.slurm_bin}:{base}" if self.slurm_bin else base

    def slurm_env(self) -> dict[str, str]:
        """This process's environment with the stack's SLURM_CONF and Slurm commands first on PATH."""
        env = dict(os.environ)
        if "SLURM_CONF" in self.env:
            env["SLURM_CONF"] = self.env["SLURM_CONF"]
        env["PATH"] = self.command_path(env.get("PATH", "/usr/bin:/bin"))
        return env

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, check=check, env=self.slurm_env(), timeout=60)

    def stack_sh(self, *args: str) -> subprocess.CompletedProcess[str]:
        script = ROOT / "deploy" / "local" / "stack.sh"
        return subprocess.run(
            ["bash", str(script), *args],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "CLUSTERCTL_STACK_DIR": str(self.dir)},
        )


def stack_for(version: str | None) -> Stack:
    """For a bench: the stack of ``--slurm VERSION`` (None: the suite's); exits saying how to start it."""
    directory = stack_dir_for(version)
    if not (directory / "env").exists():
        how = f" --slurm {version}" if version else ""
        raise SystemExit(f"no stack in {directory}: run deploy/local/stack.sh up{how}")
    return Stack.load(directory)


def missing(what: str) -> None:
    """Skip a test that needs the stack, or fail it under CLUSTERCTL_REQUIRE_STACK=1 (set by .ci/run):
    a skipped integration test proves nothing."""
    if os.environ.get("CLUSTERCTL_REQUIRE_STACK") == "1":
        pytest.fail(f"{what}: run deploy/local/stack.sh up")
    pytest.skip(f"{what}: deploy/local/stack.sh up")


def load_stack() -> Stack:
    """The stack for a fixture: skips (or fails, see :func:`missing`) when it is not up."""
    env_file = STACK_DIR / "env"
    if not env_file.exists():
        missing(f"the local stack is not up ({env_file} missing)")
    return Stack.load(STACK_DIR)
