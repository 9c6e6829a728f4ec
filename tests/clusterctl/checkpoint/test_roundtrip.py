"""Round trips of nested states through real backends (temp dirs and SeaweedFS)."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy

from clusterctl.checkpoint import CheckpointManager, InvalidStateError
from clusterctl.storage import InvalidURIError

from .helpers import fast_config

ALL_DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "longdouble",
    "clongdouble",
    "datetime64[ns]",
    "timedelta64[s]",
    "U7",
    "S5",
    ">f4",
    ">i8",
    "V3",
]


def assert_same(a: Any, b: Any) -> None:
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype
        if a.dtype.kind in "fc" and a.dtype.itemsize > 8:  # long double scalars carry undefined padding bytes
            assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
        else:
            assert a.tobytes() == b.tobytes()
    elif isinstance(a, float) and a != a:
        assert b != b
    else:
        assert a == b


def nested_state() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "model": {
            "encoder": {
                "weight": rng.standard_normal((64, 33)).astype(np.float32),
                "bias": rng.standard_normal(33).astype(np.float16),
            },
            "layers": [{"w": rng.integers(0, 100, (5, 5))} for _ in range(3)],
            "odd/key~name": np.arange(4, dtype=np.int16),
            "non_contiguous": np.arange(100, dtype=np.float64).reshape(10, 10)[::2, 1::3],
            "fortran": np.asfortranarray(rng.standard_normal((7, 9))),
        },
        "optimizer": {"lr": 3e-4, "betas": (0.9, 0.999), "step": 1234, "nan": float("nan"), "none": None},
        "rng": {"state": b"\x00\xff" * 100, "extra": bytearray(b"abc"), "empty": b""},
        "meta": {"name": "exp-7", "tags": ["a", "b"], "flag": True, "uni": "héllo ✓"},
        "scalars": {"f": np.float32(1.5), "i": np.int64(-3), "b": np.bool_(True)},
        "empties": {
            "e0": np.zeros(0, dtype=np.float32),
            "e2": np.zeros((3, 0, 2), dtype=np.int64),
            "zero_d": np.array(7.0),
        },
        "mixed": [1, np.ones(2, dtype=np.uint8), "x", (2, np.zeros(1))],
    }


def test_nested_round_trip(any_uri: str) -> None:
    state = nested_state()
    with CheckpointManager(any_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        assert ckpt.restore() is None and ckpt.latest_step() is None
        result = ckpt.save(10, state).result(timeout=60)
        assert result.committed and result.step == 10
        assert ckpt.steps() == [10] and ckpt.latest_step() == 10
        restored = ckpt.restore()
        assert_same(state, restored)
        assert ckpt.last_restored_step == 10


def test_snapshot_is_a_copy(posix_uri: str) -> None:
    arr = np.ones(1000, dtype=np.float32)
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        h = ckpt.save(1, {"a": arr})
        arr[:] = 5  # mutate right after save() returned: the checkpoint holds the old values
        h.result()
        assert (ckpt.restore()["a"] == 1).all()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_numpy_dtype(posix_uri: str, dtype: str) -> None:
    dt = np.dtype(dtype)
    raw = np.random.default_rng(1).integers(0, 256, size=6 * dt.itemsize, dtype=np.uint8)
    arr = raw.view(dt).reshape(2, 3) if dt.kind not in "mM" else np.arange(6).astype(dt).reshape(2, 3)
    state = {"x": arr, "empty": np.zeros((0, 4), dtype=dt), "scalar": arr.reshape(-1)[0]}
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(1, state).result()
        out = ckpt.restore()
    assert_same(state, out)


def test_structured_dtype(posix_uri: str) -> None:
    arr = np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8", (2,))])
    arr["a"] = [1, 2, 3]
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(1, {"s": arr}).result()
        assert_same({"s": arr}, ckpt.restore())


def test_shard_opens_with_safetensors(posix_uri: str) -> None:
    state = {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "n": {"b": np.ones(3, dtype=np.int64)},
        "big": np.zeros(2, dtype=np.complex128),
    }
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(3, state).result()
    [shard] = glob.glob(os.path.join(posix_uri, "steps", "000000000003", "*", "rank-00000-of-00001.safetensors"))
    loaded = safetensors.numpy.load_file(shard)
    np.testing.assert_array_equal(loaded["w"], state["w"])
    np.testing.assert_array_equal(loaded["n/b"], state["n"]["b"])
    assert loaded["big"].dtype == np.uint8 and loaded["big"].nbytes == 32  # raw bytes, dtype in the manifest
    with open(shard, "rb") as f:
        hlen = int.from_bytes(f.read(8), "little")
    assert (8 + hlen) % 8 == 0


def test_large_parts_round_trip(any_uri: str) -> None:
    """A shard of several parts goes up as parallel multipart parts and comes back verified."""
    rng = np.random.default_rng(2)
    state = {"a": rng.standard_normal(3 << 20).astype(np.float32), "b": rng.integers(0, 9, 1 << 20)}
    with CheckpointManager(any_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        res = ckpt.save(5, state).result(timeout=120)
        assert res.bytes > 20 << 20
        assert_same(state, ckpt.restore())


class Opaque:
    pass


@pytest.mark.parametrize(
    ("state", "needle"),
    [
        ({"o": np.array([1, "x"], dtype=object)}, "object arrays"),
        ({"c": Opaque()}, "cannot save"),
        ({"s": {1, 2}}, "cannot save"),
        ({(1, 2): np.zeros(1)}, "keys must be str or int"),
        ({True: np.zeros(1)}, "keys must be str or int"),
        ({"../etc/passwd": np.zeros(1)}, "path traversal"),
        ({"a": {"..": 1}}, "refused"),
        ({"/abs": 1}, "absolute"),
        ({"a\\b": 1}, "backslash"),
        ({"a\x00b": 1}, "control character"),
        ({"": 1}, "refused"),
    ],
)
def test_refused_states(posix_uri: str, state: dict[Any, Any], needle: str) -> None:
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        with pytest.raises(InvalidStateError) as info:
            ckpt.save(1, state)
        assert needle in str(info.value)
        assert ckpt.steps() == []


def test_refused_steps(posix_uri: str) -> None:
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        for bad in (-1, 1.5, "3", True, 10**12):
            with pytest.raises(InvalidStateError):
                ckpt.save(bad, {})  # type: ignore[arg-type]


def test_not_a_mapping(posix_uri: str) -> None:
    with CheckpointManager(posix_uri, rank=0, world_size=1) as ckpt, pytest.raises(InvalidStateError):
        ckpt.save(1, [np.zeros(1)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "uri", ["gs://bucket/x", "s3://", "s3://bucket/../x", "s3://Bad_Bucket", "file://host/x", "", "s3://bucket/a\x00"]
)
def test_bad_uris(uri: str) -> None:
    with pytest.raises(InvalidURIError):
        CheckpointManager(uri, rank=0, world_size=1)


def test_bad_rank() -> None:
    with pytest.raises(ValueError, match="rank 2"):
        CheckpointManager("/tmp/x", rank=2, world_size=2)


def test_file_uri_and_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with CheckpointManager("rel/ckpt", rank=0, world_size=1) as ckpt:
        ckpt.save(1, {"x": np.ones(2)}).result()
    with CheckpointManager(f"file://{tmp_path}/rel/ckpt", rank=0, world_size=1) as ckpt:
        assert ckpt.steps() == [1]
