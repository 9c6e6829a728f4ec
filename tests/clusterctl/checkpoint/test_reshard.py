"""Save at world size N, restore at M (1..4, uneven splits) with Sharded/Replicated layouts, on POSIX
and SeaweedFS; each rank reads only the byte ranges it needs; rank-local leaves are named."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clusterctl.checkpoint import (
    CheckpointFallbackWarning,
    CheckpointManager,
    Replicated,
    Sharded,
    WorldSizeMismatchError,
    checksum,
    layout,
)
from clusterctl.checkpoint.manifest import load_marker
from clusterctl.storage import PosixStorage, Storage, open_storage

from .helpers import fast_config

torch = pytest.importorskip("torch")

A = np.arange(13 * 3, dtype=np.float32).reshape(13, 3)  # 13 rows: uneven at 2, 3 and 4 ranks
B = torch.arange(10, dtype=torch.float32).to(torch.bfloat16)
C = np.arange(5 * 6, dtype=np.int64).reshape(5, 6)  # sharded along dim 1 (tensor-parallel style)
REP = {"w": np.linspace(0, 1, 1000).astype(np.float64), "t": torch.ones(7, 3), "names": ["a", "b"]}


def split(n: int, world: int, rank: int, uneven: bool = False) -> tuple[int, int]:
    """[lo, hi) of rank's rows: torch.chunk-like, or an uneven split that gives rank 0 one row more."""
    cuts = [0] + [(n * (r + 1)) // world + (1 if uneven and r < world - 1 else 0) for r in range(world)]
    cuts[-1] = n
    return min(cuts[rank], n), min(cuts[rank + 1], n)


def state_of(rank: int, world: int, step: int = 1) -> dict[str, Any]:
    a0, a1 = split(13, world, rank, uneven=True)
    b0, b1 = split(10, world, rank)
    c0, c1 = split(6, world, rank)
    return {
        "a": Sharded(A[a0:a1] + step, A.shape, a0),
        "b": Sharded(B[b0:b1], B.shape, (b0,)),
        "c": Sharded(C[:, c0:c1], C.shape, (0, c0)),
        "rep": Replicated(REP),
        "step": step,
        "mine": np.full(2, rank),
    }


def template_of(rank: int, world: int) -> dict[str, Any]:
    a0, a1 = split(13, world, rank)
    b0, b1 = split(10, world, rank, uneven=True)
    c0, c1 = split(6, world, rank, uneven=True)
    return {
        "a": Sharded(np.empty((a1 - a0, 3), np.float32), A.shape, a0),
        "b": Sharded(torch.empty(b1 - b0), B.shape, b0),
        "c": Sharded(np.empty((5, c1 - c0)), C.shape, (0, c0)),
    }


class CountingStorage:
    """A storage that counts the bytes read through ranged reads (the data path of a restore)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read_into(self, key: str, out: memoryview, *, offset: int = 0) -> None:
        self.read += len(out)
        self.inner.read_into(key, out, offset=offset)


def save_world(uri: str, world: int, make: Callable[[int, int], dict[str, Any]], step: int = 1) -> None:
    managers = [
        CheckpointManager(
            uri, rank=r, world_size=world, keep=0, config=fast_config(run_id=f"w{world}", gc_on_commit=False)
        )
        for r in range(world)
    ]
    handles = [m.save(step, make(m.rank, world)) for m in managers]
    for h in handles:
        assert h.result().committed
    for m in managers:
        m.close()


def check_rank(state: dict[str, Any], rank: int, world: int, step: int = 1) -> None:
    a0, a1 = split(13, world, rank)
    b0, b1 = split(10, world, rank, uneven=True)
    c0, c1 = split(6, world, rank, uneven=True)
    np.testing.assert_array_equal(state["a"], A[a0:a1] + step)
    assert isinstance(state["b"], torch.Tensor) and state["b"].dtype == torch.bfloat16
    assert torch.equal(state["b"], B[b0:b1])
    np.testing.assert_array_equal(state["c"], C[:, c0:c1])
    np.testing.assert_array_equal(state["rep"]["w"], REP["w"])
    assert torch.equal(state["rep"]["t"], REP["t"]) and state["rep"]["names"] == ["a", "b"]
    assert state["step"] == step


@pytest.mark.parametrize("saved", [1, 2, 3, 4])
@pytest.mark.parametrize("now", [1, 2, 3, 4])
def test_n_to_m_on_posix(posix_uri: str, saved: int, now: int) -> None:
    save_world(posix_uri, saved, state_of)
    for rank in range(now):
        with CheckpointManager(posix_uri, rank=rank, world_size=now, config=fast_config()) as ckpt:
            state = ckpt.restore(template=template_of(rank, now), rank_local="drop" if now != saved else "error")
            check_rank(state, rank, now)
            assert ("mine" in state) == (now == saved)


@pytest.mark.s3
@pytest.mark.parametrize(("saved", "now"), [(2, 3), (3, 2), (4, 1)])
def test_n_to_m_on_s3(s3_uri: str, saved: int, now: int) -> None:
    save_world(s3_uri, saved, state_of)
    for rank in range(now):
        with CheckpointManager(s3_uri, rank=rank, world_size=now, config=fast_config()) as ckpt:
            check_rank(ckpt.restore(template=template_of(rank, now), rank_local="drop"), rank, now)


def test_without_template_same_world_gives_own_piece_and_one_process_the_whole(posix_uri: str) -> None:
    save_world(posix_uri, 2, state_of)
    with CheckpointManager(posix_uri, rank=1, world_size=2, config=fast_config()) as ckpt:
        state = ckpt.restore()
        a0, a1 = split(13, 2, 1, uneven=True)
        np.testing.assert_array_equal(state["a"], A[a0:a1] + 1)
        assert state["mine"].tolist() == [1, 1]
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        state = ckpt.restore(rank_local="rank0")  # evaluation on one process: whole arrays
        np.testing.assert_array_equal(state["a"], A + 1)
        assert torch.equal(state["b"], B) and state["mine"].tolist() == [0, 0]


def test_rank_local_leaf_at_another_world_size_is_named(posix_uri: str) -> None:
    save_world(posix_uri, 2, state_of)
    with CheckpointManager(posix_uri, rank=0, world_size=3, config=fast_config()) as ckpt:
        with pytest.raises(WorldSizeMismatchError, match="'mine' is rank-local") as info:
            ckpt.restore(template=template_of(0, 3))
        assert (info.value.saved, info.value.current) == (2, 3)
        assert "rank_local=" in str(info.value)


def stored_shard_bytes(uri: str) -> int:
    return sum(p.stat().st_size for p in Path(uri).glob("steps/*/*/*.safetensors"))


def test_replicated_leaves_are_stored_once_spread_over_ranks(posix_uri: str) -> None:
    big = {f"p{i}": np.full(50_000, i, dtype=np.float32) for i in range(8)}
    save_world(posix_uri, 4, lambda r, w: {"model": Replicated(big)})
    unique = sum(v.nbytes for v in big.values())
    stored = stored_shard_bytes(posix_uri)
    assert unique <= stored < unique * 1.01
    sizes = [p.stat().st_size for p in Path(posix_uri).glob("steps/*/*/*.safetensors")]
    assert sum(s > 100_000 for s in sizes) >= 2  # more than one rank writes
    for rank in range(4):
        with CheckpointManager(posix_uri, rank=rank, world_size=4, config=fast_config()) as ckpt:
            out = ckpt.restore()["model"]
            assert all(np.array_equal(out[k], v) for k, v in big.items())


def test_each_rank_reads_only_what_it_needs(posix_uri: str) -> None:
    rows, width = 8192, 512  # 16 MiB float32: 4 MiB per rank at 4 ranks, 64x the 256 KiB checksum chunk
    full = np.random.default_rng(0).standard_normal((rows, width)).astype(np.float32)
    half = rows // 2
    save_world(posix_uri, 2, lambda r, w: {"x": Sharded(full[r * half : (r + 1) * half], full.shape, r * half)})
    for now in (1, 4):
        for rank in range(now):
            lo, hi = split(rows, now, rank)
            storage = CountingStorage(PosixStorage(posix_uri))
            with CheckpointManager(
                posix_uri,
                rank=rank,
                world_size=now,
                storage=storage,  # type: ignore[arg-type]
                config=fast_config(),
            ) as ckpt:
                out = ckpt.restore(template={"x": Sharded(np.empty((hi - lo, width), np.float32), full.shape, lo)})
            np.testing.assert_array_equal(out["x"], full[lo:hi])
            needed = (hi - lo) * width * 4
            assert storage.read <= needed * 1.1, (now, rank, storage.read, needed)


def test_corrupt_shard_of_one_rank_during_reshard_falls_back(posix_uri: str) -> None:
    save_world(posix_uri, 2, state_of, step=1)
    save_world(posix_uri, 2, lambda r, w: state_of(r, w, 2), step=2)
    shard = next(Path(posix_uri).glob("steps/000000000002/*/rank-00001-of-00002.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF
    shard.write_bytes(bytes(data))
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        with pytest.warns(CheckpointFallbackWarning, match="xxh3"):
            state = ckpt.restore(template=template_of(0, 1), rank_local="drop")
        assert ckpt.last_restored_step == 1
        check_rank(state, 0, 1, step=1)


def retamper(storage: Storage, step: int, rank: int, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit a manifest and re-seal the marker's digest, as someone with write access could."""
    marker = load_marker(storage.get(layout.commit_key(step)))
    key = marker.shards[rank].manifest_key
    doc = json.loads(storage.get(key))
    edit(doc)
    data = json.dumps(doc).encode()
    storage.put(key, data)
    marker.shards[rank].manifest_size, marker.shards[rank].manifest_xxh3_64 = len(data), checksum.digest(data)
    storage.put(layout.commit_key(step), marker.to_json())


@pytest.mark.parametrize("bad_shape", [[1.5], ["x"], [None], [True], [-1], [10**30], {"a": 1}])
def test_tampered_shape_falls_back(posix_uri: str, bad_shape: Any) -> None:
    with CheckpointManager(posix_uri, rank=0, world_size=1, keep=0, config=fast_config()) as ckpt:
        ckpt.save(1, {"t": torch.ones(3), "n": np.ones(2)}).result()
        ckpt.save(2, {"t": torch.zeros(3), "n": np.zeros(2)}).result()

        def edit(doc: dict[str, Any]) -> None:
            for item in doc["tree"]["items"]:
                item[1]["shape"] = bad_shape

        retamper(open_storage(posix_uri), 2, 0, edit)
        with pytest.warns(CheckpointFallbackWarning):
            state = ckpt.restore()
        assert ckpt.last_restored_step == 1 and torch.equal(state["t"], torch.ones(3))


def test_template_tensors_are_filled_in_place(posix_uri: str) -> None:
    save_world(posix_uri, 2, state_of)
    template = template_of(0, 1)
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        state = ckpt.restore(template=template, rank_local="drop")
    assert state["a"] is template["a"].local  # same dtype and shape: no new allocation
    np.testing.assert_array_equal(template["a"].local, A + 1)
    assert state["b"] is not template["b"].local and state["b"].dtype == torch.bfloat16  # dtype differs
