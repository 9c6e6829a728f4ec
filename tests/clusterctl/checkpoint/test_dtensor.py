"""torch DTensors (FSDP2 fully_shard, tensor-parallel Shard(1), Replicate) saved at one mesh and loaded
at another, with real torch.distributed processes over gloo on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_port

pytest.importorskip("torch")
WORKER = str(Path(__file__).with_name("dtensor_worker.py"))


def run(mode: str, uri: str, world: int) -> list[dict[str, object]]:
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, mode, uri, str(r), str(world), port],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=180)
        assert p.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


@pytest.mark.parametrize(("saved", "now"), [(2, 1), (1, 2), (2, 3)])
def test_dtensor_save_at_one_mesh_load_at_another(tmp_path: Path, saved: int, now: int) -> None:
    uri = str(tmp_path / "ckpt")
    assert all(o["ok"] for o in run("save", uri, saved))
    outs = run("load", uri, now)
    assert all(o["ok"] and o["step"] == 5 for o in outs), outs
    rows = [o["local0"][0] for o in outs]  # Linear(6, 10) weight: 10 rows split torch.chunk-style
    assert sum(rows) == 10 and len(rows) == now  # type: ignore[arg-type]


def test_fsdp_checkpoint_loads_on_one_plain_process(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    run("save", uri, 2)
    assert run("plain", uri, 1) == [{"ok": True, "step": 5}]


def test_partial_template_is_the_callers_error_not_a_corrupt_step(tmp_path: Path) -> None:
    [out] = run("partial", str(tmp_path / "ckpt"), 1)
    assert out["ok"] and out["kind"] == "RestoreError", out
    assert "template at 'w'" in str(out["error"]) and "is not supported" in str(out["error"]), out
    assert out["fallbacks"] == 0, out  # valid steps are not skipped for the caller's mistake
