"""Regenerate the gRPC stubs in client/clusterctl/v1 from proto/.

Run: python scripts/gen_proto.py [--out DIR]. tests/test_proto_fresh.py regenerates into a temp dir
and compares, so a stale checkout fails the suite instead of silently drifting.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpc_tools import protoc  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"
DEFAULT_OUT = ROOT / "client"


def generate(out: Path) -> list[Path]:
    """Compile every .proto under proto/ into OUT (package path mirrors proto path)."""
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(PROTO_ROOT.rglob("*.proto"))
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *[str(p.relative_to(PROTO_ROOT)) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    pkg = out / "clusterctl" / "v1"
    init = pkg / "__init__.py"
    init.write_text('"""Generated gRPC stubs for clusterctl.v1 (do not edit; see scripts/gen_proto.py)."""\n')
    return sorted(pkg.iterdir())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ns = parser.parse_args()
    for path in generate(ns.out):
        print(path.relative_to(ns.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
