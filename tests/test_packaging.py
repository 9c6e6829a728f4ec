"""The base install is the client alone: a training job must not pull in clusterd's libraries."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Distributions only clusterd needs, and the modules they provide.
SERVICE_ONLY = {
    "grpcio-health-checking": "grpc_health",
    "grpcio-reflection": "grpc_reflection",
    "prometheus-client": "prometheus_client",
    "h11": "h11",
    "aiohttp": "aiohttp",
    "pyjwt": "jwt",
    "python-json-logger": "pythonjsonlogger",
    "sqlalchemy": "sqlalchemy",
    "alembic": "alembic",
}


def _name(requirement: str) -> str:
    for sep in "<>=![; ":
        requirement = requirement.split(sep, 1)[0]
    return requirement.strip().lower()


def test_base_dependencies_carry_no_service_library() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {_name(r) for r in project["dependencies"]}
    assert base.isdisjoint(SERVICE_ONLY), base & SERVICE_ONLY.keys()
    service = {_name(r) for r in project["optional-dependencies"]["service"]}
    assert set(SERVICE_ONLY) <= service


def test_client_modules_import_without_service_libraries() -> None:
    """What a job imports (checkpoints, CLI, gRPC client) works with the service's libraries absent.

    They are made unimportable rather than checked in sys.modules: grpcio itself tries the health
    and reflection packages when they happen to be installed.
    """
    probe = (
        "import json, sys\n"
        f"blocked = {sorted(SERVICE_ONLY.values())!r}\n"
        "class Absent:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in blocked:\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Absent())\n"
        "import clusterctl.checkpoint, clusterctl.client, clusterctl.cli.main, clusterctl.slurm_env\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'clusterd')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == []
