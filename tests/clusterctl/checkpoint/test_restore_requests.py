"""What restore() asks storage for: no request twice, and the independent ones at the same time."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

from clusterctl.checkpoint import CheckpointManager, Replicated, Sharded, layout, restore
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


ROWS = np.arange(12 * 2, dtype=np.float32).reshape(12, 2)


def save_sharded(storage: MemoryStorage, world: int) -> None:
    config = fast_config(run_id=f"w{world}", gc_on_commit=False)
    managers = [
        CheckpointManager("/unused", rank=r, world_size=world, keep=0, storage=storage, config=config)
        for r in range(world)
    ]
    size = 12 // world
    handles = [
        m.save(
            1,
            {
                "w": Sharded(ROWS[m.rank * size : (m.rank + 1) * size], ROWS.shape, m.rank * size),
                "rep": Replicated({f"r{i}": np.full(3, i) for i in range(8)}),
            },
        )
        for m in managers
    ]
    for h in handles:
        assert h.result().committed
    for m in managers:
        m.close()


def test_other_ranks_manifests_are_read_together_when_resharding() -> None:
    storage = MemoryStorage()
    save_sharded(storage, 3)
    together = threading.Barrier(2, timeout=10)  # ranks 1 and 2: base rank 0's manifest comes first

    def gate(op: str, key: str) -> None:
        if "manifest" in key and "rank-00000" not in key:
            together.wait()

    storage.fault = gate
    with CheckpointManager("/unused", rank=0, world_size=2, storage=storage, config=fast_config()) as ckpt:
        state = ckpt.restore()
    np.testing.assert_array_equal(state["w"], ROWS[:6])
    assert state["rep"]["r7"].tolist() == [7, 7, 7]


def test_ranks_needed() -> None:
    leaf = {"t": "ndarray", "dtype": "<f4", "shape": [2]}
    tree = {
        "t": "map",
        "items": [
            ["a", {**leaf, "rank": 2}],
            ["b", {"t": "replicated", "v": {"t": "list", "items": [{**leaf, "rank": 1}, {"t": "json", "v": 3}]}}],
            ["c", {"t": "json", "v": "x"}],
        ],
    }
    assert restore.ranks_needed(tree, foreign=False, world=4) == {1, 2}
    assert restore.ranks_needed(tree, foreign=True, world=4) == {0, 1, 2, 3}  # a rank-local JSON value
    only_rep = {"t": "replicated", "v": {"t": "json", "v": 1}}
    assert restore.ranks_needed(only_rep, foreign=True, world=4) == set()
    sharded = {"t": "map", "items": [["w", {"t": "sharded", "gshape": [4], "offset": [0], "v": leaf}]]}
    assert restore.ranks_needed(sharded, foreign=False, world=3) == set()
    assert restore.ranks_needed(sharded, foreign=True, world=3) == {0, 1, 2}
    assert restore.ranks_needed({"t": "map", "items": [["a", {**leaf, "rank": 9}]]}, foreign=False, world=4) == set()
