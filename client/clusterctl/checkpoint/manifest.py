"""Shard manifests and commit markers: small JSON documents, validated field by field on load.

Both are untrusted input at restore time (anyone with write access to the bucket can put
anything there), so :func:`load_manifest` and :func:`load_marker` check types and ranges and
raise ``ValueError`` with the reason; keys they contain are never used as object names (the
reader recomputes names from the layout and compares).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT_VERSION = 1
MANIFEST_FORMAT = "clusterctl.checkpoint.shard-manifest"
MARKER_FORMAT = "clusterctl.checkpoint.commit"
MAX_MANIFEST_BYTES = 64 << 20
MAX_MARKER_BYTES = 64 << 20


@dataclass
class ShardManifest:
    step: int
    rank: int
    world_size: int
    attempt: str
    shard_key: str
    shard_size: int
    chunk_size: int
    chunks: list[str]
    tree: dict[str, Any]
    tensor_count: int
    created: float
    host: str
    algorithm: str = "xxh3_64"

    def to_json(self) -> bytes:
        doc = {
            "format": MANIFEST_FORMAT, "version": FORMAT_VERSION, "step": self.step, "rank": self.rank,
            "world_size": self.world_size, "attempt": self.attempt, "created": self.created, "host": self.host,
            "shard": {"key": self.shard_key, "size": self.shard_size,
                      "checksum": {"algorithm": self.algorithm, "chunk_size": self.chunk_size,
                                   "chunks": self.chunks}},
            "tensor_count": self.tensor_count, "tree": self.tree,
        }
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass
class ShardEntry:
    rank: int
    manifest_key: str
    manifest_size: int
    manifest_xxh3_64: str
    shard_size: int


@dataclass
class CommitMarker:
    step: int
    world_size: int
    attempt: str
    created: float
    shards: list[ShardEntry] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(s.shard_size for s in self.shards)

    def to_json(self) -> bytes:
        doc = {
            "format": MARKER_FORMAT, "version": FORMAT_VERSION, "step": self.step, "world_size": self.world_size,
            "attempt": self.attempt, "created": self.created, "total_bytes": self.total_bytes,
            "shards": [asdict(s) for s in self.shards],
        }
        return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def _int(doc: dict[str, Any], name: str, lo: int = 0) -> int:
    v = doc.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"field {name!r} must be an int >= {lo}, got {v!r}")
    return v


def _str(doc: dict[str, Any], name: str) -> str:
    v = doc.get(name)
    if not isinstance(v, str):
        raise ValueError(f"field {name!r} must be a string, got {type(v).__name__}")
    return v


def _doc(data: bytes, fmt: str) -> dict[str, Any]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise ValueError(f"not a {fmt} document")
    version = doc.get("version")
    if version != FORMAT_VERSION:
        raise ValueError(f"format version {version!r} is not supported (this clusterctl reads {FORMAT_VERSION})")
    return doc


def load_manifest(data: bytes) -> ShardManifest:
    doc = _doc(data, MANIFEST_FORMAT)
    shard = doc.get("shard")
    if not isinstance(shard, dict) or not isinstance(shard.get("checksum"), dict):
        raise ValueError("field 'shard' is malformed")
    ck = shard["checksum"]
    if ck.get("algorithm") != "xxh3_64":
        raise ValueError(f"checksum algorithm {ck.get('algorithm')!r} is not supported")
    chunks = ck.get("chunks")
    if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
        raise ValueError("field 'chunks' must be a list of strings")
    tree = doc.get("tree")
    if not isinstance(tree, dict):
        raise ValueError("field 'tree' must be an object")
    created = doc.get("created", 0.0)
    m = ShardManifest(
        step=_int(doc, "step"), rank=_int(doc, "rank"), world_size=_int(doc, "world_size", 1),
        attempt=_str(doc, "attempt"), shard_key=_str(shard, "key"), shard_size=_int(shard, "size"),
        chunk_size=_int(ck, "chunk_size", 1), chunks=chunks, tree=tree, tensor_count=_int(doc, "tensor_count"),
        created=float(created) if isinstance(created, int | float) else 0.0, host=str(doc.get("host", "")),
    )
    if len(chunks) != -(-m.shard_size // m.chunk_size):
        raise ValueError(f"{len(chunks)} chunk checksums do not cover {m.shard_size} bytes")
    return m


def load_marker(data: bytes) -> CommitMarker:
    doc = _doc(data, MARKER_FORMAT)
    shards = doc.get("shards")
    if not isinstance(shards, list):
        raise ValueError("field 'shards' must be a list")
    entries = []
    for s in shards:
        if not isinstance(s, dict):
            raise ValueError("shard entry is not an object")
        entries.append(ShardEntry(_int(s, "rank"), _str(s, "manifest_key"), _int(s, "manifest_size"),
                                  _str(s, "manifest_xxh3_64"), _int(s, "shard_size")))
    created = doc.get("created", 0.0)
    m = CommitMarker(_int(doc, "step"), _int(doc, "world_size", 1), _str(doc, "attempt"),
                     float(created) if isinstance(created, int | float) else 0.0, entries)
    if sorted(e.rank for e in entries) != list(range(m.world_size)):
        raise ValueError(f"marker lists ranks {[e.rank for e in entries]}, expected 0..{m.world_size - 1}")
    return m
