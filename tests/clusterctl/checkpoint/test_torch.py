"""torch tensors (when torch is installed): dtypes incl. bfloat16, and ranks under torch.distributed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

from clusterctl.checkpoint import CheckpointManager
from tests.support.ports import free_port

from .helpers import fast_config

torch = pytest.importorskip("torch")


def test_torch_round_trip_all_dtypes(posix_uri: str) -> None:
    state = {
        "bf16": torch.randn(4, 5).to(torch.bfloat16),
        "f16": torch.randn(3).half(),
        "f32": torch.randn(2, 3, requires_grad=True),
        "f64": torch.randn(2, dtype=torch.float64),
        "i64": torch.arange(10),
        "u8": torch.arange(5, dtype=torch.uint8),
        "bool": torch.tensor([True, False]),
        "c64": torch.randn(3, dtype=torch.complex64),
        "c128": torch.randn(3, dtype=torch.complex128),
        "f8": torch.randn(4).to(torch.float8_e4m3fn),
        "noncontig": torch.arange(20.0).reshape(4, 5).t(),
        "empty": torch.zeros(0, 3, dtype=torch.bfloat16),
        "scalar": torch.tensor(3.5),
        "np": np.ones(2),
    }
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(1, state).result()
        out = ckpt.restore()
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            got = out[k]
            assert isinstance(got, torch.Tensor) and got.dtype == v.dtype and got.shape == v.shape, k
            assert torch.equal(
                got.view(torch.uint8) if v.dtype == torch.float8_e4m3fn else got,
                v.detach().view(torch.uint8) if v.dtype == torch.float8_e4m3fn else v.detach(),
            ), k
        else:
            np.testing.assert_array_equal(out[k], v)


def test_bf16_shard_is_safetensors_bf16(posix_uri: str) -> None:
    t = torch.randn(8).to(torch.bfloat16)
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(1, {"t": t}).result()
    [shard] = list(Path(posix_uri).glob("steps/*/*/*.safetensors"))
    from safetensors.torch import load_file

    assert torch.equal(load_file(str(shard))["t"], t)
    with pytest.raises(Exception):  # noqa: B017 - numpy has no bfloat16, safetensors says so
        safetensors.numpy.load_file(str(shard))


WORKER = textwrap.dedent("""
    import json, os, sys, numpy as np, torch, torch.distributed as dist
    from clusterctl.checkpoint import CheckpointConfig, CheckpointManager
    rank, world, uri, port, fail = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    ckpt = CheckpointManager(uri, keep=0, config=CheckpointConfig(commit_timeout=60, poll_initial=0.01))
    out = {"rank": ckpt.rank, "world": ckpt.world_size, "run_id": ckpt.run_id}
    ckpt.save(1, {"t": torch.full((3,), float(rank)), "r": rank}).result()
    if fail == "1" and rank == 1:  # rank 1 cannot write its shard of step 2
        from clusterctl.storage import StorageError
        def refuse(key, data, **kw):
            raise StorageError(f"{key}: disk full", key=key)
        ckpt.storage.put = refuse
    try:
        ckpt.save(2, {"t": torch.full((3,), 10.0 + rank), "r": rank}).result()
        out["step2"] = "committed"
    except Exception as exc:
        out["step2"] = type(exc).__name__ + ": " + str(exc)
    dist.barrier()
    state = ckpt.restore()
    out["restored"] = [ckpt.last_restored_step, float(state["t"][0]), state["r"]]
    ckpt.close()
    dist.destroy_process_group()
    print(json.dumps(out), flush=True)
""")


def run_dist(uri: str, fail: bool) -> list[dict[str, object]]:
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(r), "2", uri, port, "1" if fail else "0"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


def test_torch_distributed_ranks(tmp_path: Path) -> None:
    outs = run_dist(str(tmp_path / "ckpt"), fail=False)
    assert [(o["rank"], o["world"]) for o in outs] == [(0, 2), (1, 2)]
    assert outs[0]["run_id"] == outs[1]["run_id"] and str(outs[0]["run_id"]).startswith("dist-")
    assert [o["step2"] for o in outs] == ["committed", "committed"]
    assert [o["restored"] for o in outs] == [[2, 10.0, 0], [2, 11.0, 1]]


def test_torch_distributed_failure_is_agreed(tmp_path: Path) -> None:
    """Rank 1 fails to write: rank 0 learns it at once through the gloo group (no commit timeout)."""
    outs = run_dist(str(tmp_path / "ckpt"), fail=True)
    assert "another rank failed" in str(outs[0]["step2"])
    assert "disk full" in str(outs[1]["step2"]) and "rank 1" in str(outs[1]["step2"])
    assert [o["restored"][0] for o in outs] == [1, 1]
