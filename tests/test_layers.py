"""The wire types (clusterctl.v1) stay at the service's edge: the API, the dashboard, the server that
registers them, and the store's reader of specs earlier releases stored as protobuf."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[1] / "service" / "clusterd"
EDGE = ("api/", "web/", "server.py", "store/migrations/")
WIRE = "clusterctl.v1"


def _wire_imports(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name == WIRE or a.name.startswith(f"{WIRE}."))
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            if node.module == WIRE or node.module.startswith(f"{WIRE}."):
                yield node.module
            elif node.module == "clusterctl" and any(a.name == "v1" for a in node.names):
                yield WIRE


def _modules() -> Iterator[tuple[str, list[str]]]:
    for path in sorted(SERVICE.rglob("*.py")):
        name = path.relative_to(SERVICE).as_posix()
        yield name, list(_wire_imports(ast.parse(path.read_text(), str(path))))


def test_only_the_edge_imports_the_wire_types() -> None:
    inside = {name: found for name, found in _modules() if found and not name.startswith(EDGE)}
    assert not inside, f"modules inside the service import {WIRE}: {inside}; convert at clusterd.api instead"


def test_the_check_sees_every_spelling() -> None:
    spellings = [
        "import clusterctl.v1.jobs_pb2",
        "from clusterctl.v1 import jobs_pb2",
        "from clusterctl.v1.jobs_pb2 import JobSpec",
        "from clusterctl import v1",
    ]
    for line in spellings:
        assert list(_wire_imports(ast.parse(line))), line
    assert not list(_wire_imports(ast.parse("from clusterctl.sbatch import values")))
