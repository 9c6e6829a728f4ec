"""What restore() asks storage for: no request twice, and the independent ones at the same time."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

from clusterctl.checkpoint import CheckpointManager, layout, restore
from clusterctl.storage import MemoryStorage

from .helpers import fast_config

STATE = {"w": np.arange(1000, dtype=np.float32), "step": 4}


def saved(storage: MemoryStorage) -> CheckpointManager:
    ckpt = CheckpointManager("/unused", rank=0, world_size=1, keep=0, storage=storage, config=fast_config())
    ckpt.save(4, STATE).result()
    return ckpt


def kind(op: str, key: str) -> str:
    if key.startswith("commits"):
        return f"{op} commits"
    return f"{op} {'manifest' if 'manifest' in key else 'shard' if key.endswith('.safetensors') else 'step'}"


def test_a_restore_reads_each_object_once() -> None:
    storage = MemoryStorage()
    ckpt = saved(storage)
    ops: list[str] = []
    storage.fault = lambda op, key: ops.append(kind(op, key))
    state = ckpt.restore()
    assert np.array_equal(state["w"], STATE["w"]) and state["step"] == 4
    # LIST commits/, GET the marker, then (together) LIST the step, GET the manifest, GET the shard
    assert ops[:2] == ["list commits", "get commits"]
    assert Counter(ops[2:]) == Counter(["list step", "get manifest", "get shard"])
    ckpt.close()


def test_the_structure_list_manifest_and_small_shard_are_in_flight_together() -> None:
    storage = MemoryStorage()
    ckpt = saved(storage)
    together = threading.Barrier(3, timeout=10)  # broken (and restore fails) unless all three wait at once

    def gate(op: str, key: str) -> None:
        if kind(op, key) in ("list step", "get manifest", "get shard"):
            together.wait()

    storage.fault = gate
    assert ckpt.restore()["step"] == 4
    ckpt.close()


def test_a_large_shard_is_read_by_range_after_the_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restore, "PREFETCH_BYTES", 16)
    storage = MemoryStorage()
    ckpt = saved(storage)
    ops: list[str] = []
    storage.fault = lambda op, key: ops.append(kind(op, key))
    assert np.array_equal(ckpt.restore()["w"], STATE["w"])
    assert Counter(ops) == Counter(["list commits", "get commits", "list step", "get manifest", "get shard"])
    assert ops[-1] == "get shard"
    ckpt.close()


def test_a_corrupt_prefetched_shard_still_falls_back() -> None:
    storage = MemoryStorage()
    ckpt = saved(storage)
    ckpt.save(5, {**STATE, "step": 5}).result()
    shard = next(o.key for o in storage.list_objects(layout.step_prefix(5)) if o.key.endswith(".safetensors"))
    blob = bytearray(storage.raw(shard))
    blob[-1] ^= 0xFF
    storage.overwrite(shard, bytes(blob))
    with pytest.warns(UserWarning, match="falling back"):
        assert ckpt.restore()["step"] == 4
    ckpt.close()
