"""The shard and manifest parsers against hostile input (bounds checks, no pickle, no traversal)."""

from __future__ import annotations

import contextlib
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterctl.checkpoint import layout
from clusterctl.checkpoint.assemble import leaf_span, materialize
from clusterctl.checkpoint.manifest import load_manifest, load_marker
from clusterctl.checkpoint.shard import parse_shard, plan_shard
from clusterctl.checkpoint.tree import flatten, np_dtype_from_spec


def shard_bytes(header: dict[str, object], data: bytes = b"") -> bytes:
    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body + data


@pytest.mark.parametrize(
    ("blob", "needle"),
    [
        (b"", "shorter than"),
        (struct.pack("<Q", 10**12) + b"{}", "exceeds"),
        (struct.pack("<Q", 5) + b"{}", "exceeds"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
        (struct.pack("<Q", 3) + b"{x}", "not valid JSON"),
        (shard_bytes({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"1234"), "outside"),
        (shard_bytes({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"12345678"), "do not match"),
        (shard_bytes({"a": {"dtype": "PICKLE", "shape": [1], "data_offsets": [0, 1]}}, b"1"), "unknown dtype"),
        (shard_bytes({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}, b"1"), "bad shape"),
        (shard_bytes({"a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 0]}}, b"1"), "outside"),
        (
            shard_bytes(
                {
                    "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                    "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]},
                },
                b"123",
            ),
            "overlap",
        ),
        (shard_bytes({"__metadata__": {"k": 1}}), "__metadata__"),
    ],
)
def test_hostile_shards_refused(blob: bytes, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_shard(blob)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash_the_parser(blob: bytes) -> None:
    with contextlib.suppress(ValueError):
        parse_shard(blob)


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(min_value=0, max_value=10_000))
def test_mutated_shard_header_is_refused_or_bounded(noise: bytes, pos: int) -> None:
    _, leaves = flatten({"a": np.arange(10, dtype=np.float32), "b": np.ones(3, dtype=np.int8)})
    plan = plan_shard(leaves, {"x": "y"})
    blob = bytearray(plan.header + b"\0" * (plan.total_size - len(plan.header)))
    pos %= len(blob)
    blob[pos : pos + len(noise)] = noise
    try:
        parsed = parse_shard(bytes(blob))
    except ValueError:
        return
    for _, _, start, end in parsed.tensors.values():
        assert 0 <= start <= end <= len(blob)


def test_object_dtypes_refused_on_restore() -> None:
    for spec in ("O", "|O", [["a", "O"]], [["a", "<i4"], ["b", "|O"]]):
        with pytest.raises(ValueError):
            np_dtype_from_spec(spec)
    tree = {"t": "ndarray", "name": "x", "dtype": "|O", "shape": [1], "off": [0, 8]}
    with pytest.raises(ValueError):
        materialize(tree, np.zeros(8, dtype=np.uint8), (1,), None)
    with pytest.raises(ValueError):
        leaf_span(tree)


@pytest.mark.parametrize(
    "node",
    [
        {"t": "ndarray", "dtype": "<f4", "shape": [2], "off": [0, 4]},  # size does not match the shape
        {"t": "ndarray", "dtype": "<f4", "shape": [1.5], "off": [0, 4]},  # tampered shape: not an int
        {"t": "ndarray", "dtype": "<f4", "shape": [True], "off": [0, 4]},
        {"t": "ndarray", "dtype": "<f4", "shape": [1], "off": [2, 6]},  # misaligned
        {"t": "torch", "dtype": "pickle", "shape": [1], "off": [0, 4]},
    ],
)
def test_tampered_tensor_nodes_refused(node: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        leaf_span(node)


@pytest.mark.parametrize(
    "doc",
    [
        b"",
        b"[]",
        b'{"format": "other"}',
        b'{"format": "clusterctl.checkpoint.commit", "version": 1, "step": 1, "world_size": 2, "attempt": "a",'
        b' "shards": [{"rank": 0, "manifest_key": "k", "manifest_size": 1, "manifest_xxh3_64": "0",'
        b' "shard_size": 1}]}',
        b'{"format": "clusterctl.checkpoint.commit", "version": 1, "step": -1, "world_size": 1, "attempt": "a",'
        b' "shards": []}',
    ],
)
def test_bad_markers_refused(doc: bytes) -> None:
    with pytest.raises(ValueError):
        load_marker(doc)


def test_bad_manifest_refused() -> None:
    with pytest.raises(ValueError):
        load_manifest(b'{"format": "clusterctl.checkpoint.shard-manifest", "version": 1}')


def test_layout_names() -> None:
    assert layout.commit_key(42) == "commits/000000000042.json"
    assert layout.parse_commit_key("commits/000000000042.json") == 42
    assert layout.parse_commit_key("commits/42.json") is None
    key = layout.shard_key(7, "run-1", 3, 16)
    assert key == "steps/000000000007/run-1/rank-00003-of-00016.safetensors"
    assert layout.parse_step_key(key) == (7, "run-1")
    for bad in ("..", "a/b", "", "-x", "a b"):
        with pytest.raises(ValueError):
            layout.check_attempt(bad)


def test_every_client_error_has_one_root() -> None:
    import clusterctl.checkpoint as ck
    import clusterctl.storage as st
    from clusterctl.errors import ClusterctlError, ServiceError, UsageError

    classes = [getattr(ck, n) for n in ck.__all__ if n.endswith("Error")]
    classes += [getattr(st, n) for n in st.__all__ if n.endswith("Error")]
    assert len(classes) > 15
    for cls in [*classes, ServiceError, UsageError]:
        assert issubclass(cls, ClusterctlError), cls


def test_format_1_checkpoints_are_still_read(tmp_path: object) -> None:
    """A step written by format 1 (dict nodes, tensors found by name in the header, 64 MiB chunks)."""
    import time as _time
    from pathlib import Path

    from clusterctl.checkpoint import CheckpointManager, checksum
    from clusterctl.checkpoint.tree import TensorLeaf

    root = Path(str(tmp_path)) / "v1"
    a, blob = np.arange(6, dtype=np.float32).reshape(2, 3), np.frombuffer(b"xyz", dtype=np.uint8)
    leaves = [
        TensorLeaf("model/a", a, a, "F32", [2, 3], a.nbytes, 4, {}),
        TensorLeaf("blob", blob, blob, "U8", [3], 3, 1, {}),
    ]
    plan = plan_shard(leaves, {"format": "clusterctl.checkpoint", "format_version": "1"})
    data = bytearray(plan.total_size)
    data[: len(plan.header)] = plan.header
    for leaf, off in plan.slots:
        data[off : off + leaf.nbytes] = leaf.array.tobytes()  # type: ignore[union-attr]
    shard = layout.shard_key(3, "old", 0, 1)
    tree = {
        "t": "dict",
        "items": {
            "model": {
                "t": "dict",
                "items": {"a": {"t": "ndarray", "name": "model/a", "dtype": "<f4", "shape": [2, 3]}},
            },
            "blob": {"t": "bytes", "name": "blob"},
            "step": {"t": "json", "v": 3},
            "pair": {"t": "tuple", "items": [{"t": "json", "v": 1}, {"t": "json", "v": None}]},
        },
    }
    manifest = json.dumps(
        {
            "format": "clusterctl.checkpoint.shard-manifest",
            "version": 1,
            "step": 3,
            "rank": 0,
            "world_size": 1,
            "attempt": "old",
            "created": _time.time(),
            "host": "h",
            "shard": {
                "key": shard,
                "size": len(data),
                "checksum": {"algorithm": "xxh3_64", "chunk_size": 64 << 20, "chunks": [checksum.digest(data)]},
            },
            "tensor_count": 2,
            "tree": tree,
        }
    ).encode()
    mkey = layout.manifest_key(3, "old", 0, 1)
    marker = json.dumps(
        {
            "format": "clusterctl.checkpoint.commit",
            "version": 1,
            "step": 3,
            "world_size": 1,
            "attempt": "old",
            "created": _time.time(),
            "total_bytes": len(data),
            "shards": [
                {
                    "rank": 0,
                    "manifest_key": mkey,
                    "manifest_size": len(manifest),
                    "manifest_xxh3_64": checksum.digest(manifest),
                    "shard_size": len(data),
                }
            ],
        }
    )
    for key, body in ((shard, bytes(data)), (mkey, manifest), (layout.commit_key(3), marker.encode())):
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(body)
    with CheckpointManager(str(root), rank=0, world_size=1) as ckpt:
        state = ckpt.restore()
    np.testing.assert_array_equal(state["model"]["a"], a)
    assert state["blob"] == b"xyz" and state["step"] == 3 and state["pair"] == (1, None)
