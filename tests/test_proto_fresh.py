"""The committed gRPC stubs must be exactly what scripts/gen_proto.py makes from proto/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_stubs_are_fresh(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    fresh = tmp_path / "clusterctl" / "v1"
    committed = ROOT / "client" / "clusterctl" / "v1"
    names = sorted(p.name for p in fresh.iterdir() if p.is_file())
    assert names == sorted(p.name for p in committed.iterdir() if p.is_file() and p.suffix in (".py", ".pyi"))
    stale = [n for n in names if (fresh / n).read_bytes() != (committed / n).read_bytes()]
    assert not stale, f"stale generated files {stale}: run python scripts/gen_proto.py"
