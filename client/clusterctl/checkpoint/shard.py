"""The shard file: safetensors layout (8-byte little-endian header length, JSON header, raw data).

Writing: :func:`plan_shard` orders the tensors so each is aligned to its element size (largest
alignment first, after a header padded to 8 bytes), computes offsets and the header bytes; the
snapshot then copies each tensor straight into its final place in one staging buffer, so the
buffer *is* the file and is uploaded without further copies.

Reading untrusted bytes: :func:`parse_shard` bounds-checks the header length, parses the JSON,
and checks every dtype, shape and offset against the data size before any array is made.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from dataclasses import dataclass
from typing import Any

from .tree import ST_ITEMSIZE, TensorLeaf

MAX_HEADER = 100 << 20  # the safetensors library's own limit
MAX_NDIM = 64  # numpy's own limit; also keeps math.prod over declared dims cheap


@dataclass
class ShardPlan:
    header: bytes  # length prefix + JSON header + padding: the first bytes of the file
    total_size: int
    slots: list[tuple[TensorLeaf, int]]  # leaf and its absolute byte offset in the file


def plan_shard(leaves: list[TensorLeaf], metadata: dict[str, str]) -> ShardPlan:
    """Lay out ``leaves`` in a safetensors file and return the header bytes and offsets."""
    ordered = sorted(leaves, key=lambda leaf: -leaf.alignment)  # stable: keeps state order per class
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    rel: list[tuple[TensorLeaf, int]] = []
    for leaf in ordered:
        header[leaf.name] = {
            "dtype": leaf.st_dtype,
            "shape": leaf.st_shape,
            "data_offsets": [offset, offset + leaf.nbytes],
        }
        rel.append((leaf, offset))
        offset += leaf.nbytes
    body = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    body += b" " * (-(8 + len(body)) % 8)
    prefix = struct.pack("<Q", len(body)) + body
    start = len(prefix)
    return ShardPlan(prefix, start + offset, [(leaf, start + off) for leaf, off in rel])


@dataclass
class ParsedShard:
    metadata: dict[str, str]
    tensors: dict[str, tuple[str, list[int], int, int]]  # name -> (dtype, shape, start, end) absolute


def parse_shard(buf: memoryview | bytes) -> ParsedShard:
    """Validate a shard's header against its size; return tensor positions (absolute offsets).

    Raises:
        ValueError: anything inconsistent (header length beyond the data, bad JSON, unknown dtype,
            offsets outside the data, sizes that do not match dtype x shape, overlapping tensors).
    """
    size = len(buf)
    if size < 8:
        raise ValueError(f"shard is {size} bytes, shorter than the 8-byte header length")
    (hlen,) = struct.unpack("<Q", bytes(buf[:8]))
    if hlen > MAX_HEADER or 8 + hlen > size:
        raise ValueError(f"header length {hlen} exceeds the shard ({size} bytes) or the {MAX_HEADER} limit")
    try:
        header = json.loads(bytes(buf[8 : 8 + hlen]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    data_start, data_len = 8 + hlen, size - 8 - hlen
    meta = header.pop("__metadata__", {}) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise ValueError("__metadata__ must map str to str")
    tensors: dict[str, tuple[str, list[int], int, int]] = {}
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict):
            raise ValueError(f"tensor {name!r}: entry is not an object")
        dtype, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in ST_ITEMSIZE:
            raise ValueError(f"tensor {name[:80]!r}: unknown dtype {str(dtype)[:40]}")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_NDIM
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise ValueError(f"tensor {name[:80]!r}: bad shape {str(shape)[:80]}")
        if (
            not isinstance(offs, list)
            or len(offs) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
        ):
            raise ValueError(f"tensor {name!r}: bad data_offsets {offs!r}")
        begin, end = offs
        if not 0 <= begin <= end <= data_len:
            raise ValueError(f"tensor {name!r}: data_offsets {offs} outside the {data_len} data bytes")
        if math.prod(shape) * ST_ITEMSIZE[dtype] != end - begin:
            raise ValueError(f"tensor {name!r}: {end - begin} bytes do not match {dtype} x {shape}")
        tensors[name] = (dtype, shape, data_start + begin, data_start + end)
        spans.append((begin, end))
    spans.sort()
    for (_, e1), (b2, _) in itertools.pairwise(spans):
        if b2 < e1:
            raise ValueError("tensors overlap in the data section")
    return ParsedShard(meta, tensors)
