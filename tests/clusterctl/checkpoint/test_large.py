"""A state of at least 1 GiB, end to end (POSIX temp dir; S3 throughput is measured by bench/)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from clusterctl.checkpoint import CheckpointManager

from .helpers import fast_config


@pytest.mark.slow
def test_one_gib_state_round_trip(posix_uri: str) -> None:
    n = (1 << 30) // 4 // 4
    state = {f"layer{i}": np.full(n, i + 0.5, dtype=np.float32) for i in range(4)}  # 4 x 256 MiB
    state["tail"] = {"odd": np.arange(1001, dtype=np.int8)}
    ckpt = CheckpointManager(
        posix_uri, rank=0, world_size=1, keep=1, config=fast_config(part_size=64 << 20, max_concurrency=4)
    )
    t0 = time.monotonic()
    h = ckpt.save(1, state)
    blocking = time.monotonic() - t0
    res = h.result(timeout=120)
    assert res.committed and res.bytes >= 1 << 30
    assert blocking < res.total_seconds
    del state
    restored = ckpt.restore()
    for i in range(4):
        arr = restored[f"layer{i}"]
        assert arr.shape == (n,) and arr[0] == i + 0.5 and arr[-1] == i + 0.5
    assert (restored["tail"]["odd"] == np.arange(1001, dtype=np.int8)).all()
    ckpt.close()
