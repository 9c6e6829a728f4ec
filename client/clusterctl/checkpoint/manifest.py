"""Shard manifests and commit markers: small JSON documents, validated field by field on load.

Both are untrusted input at restore time (anyone with write access to the bucket can put
anything there), so :func:`load_manifest` and :func:`load_marker` check types and ranges and
raise ``ValueError`` with the reason; keys they contain are never used as object names (the
reader recomputes names from the layout and compares). Counts that size an allocation (world
size, chunk count) are checked against the document itself before anything is built from them.

Optional authentication: when ``CLUSTERCTL_CHECKPOINT_HMAC_KEY`` is set (the same value in every
rank's environment), both documents carry ``hmac_sha256``, an HMAC-SHA256 over their canonical
JSON (sorted keys, ASCII, without that field), and loading refuses a document whose HMAC is missing
or wrong, so whoever can write to the bucket but does not hold the key cannot make a restore accept
altered manifests or markers. Shard bytes are covered through the manifest's chunk digests.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .checksum import chunk_starts

FORMAT_VERSION = 2  # 2: int keys, map nodes, byte ranges and layouts in the tree, 256 KiB chunks
READABLE_VERSIONS = (1, 2)
MANIFEST_FORMAT = "clusterctl.checkpoint.shard-manifest"
MARKER_FORMAT = "clusterctl.checkpoint.commit"
MAX_MANIFEST_BYTES = 64 << 20
MAX_MARKER_BYTES = 64 << 20
MAX_WORLD_SIZE = 1 << 20
MAX_OBJECT_BYTES = 1 << 50  # 1 PiB: any declared size above this is a lie, not a checkpoint
HMAC_ENV = "CLUSTERCTL_CHECKPOINT_HMAC_KEY"
HMAC_FIELD = "hmac_sha256"


class SignatureError(ValueError):
    """An HMAC key is configured and the document's ``hmac_sha256`` is missing or does not match."""


def hmac_key() -> bytes | None:
    """The configured HMAC key (from the environment, so every rank and restore sees the same)."""
    value = os.environ.get(HMAC_ENV, "")
    return value.encode("utf-8") if value else None


def _canonical(doc: dict[str, Any]) -> bytes:
    body = {k: v for k, v in doc.items() if k != HMAC_FIELD}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _signature(doc: dict[str, Any], key: bytes) -> str:
    return hmac.new(key, _canonical(doc), hashlib.sha256).hexdigest()


def _seal(doc: dict[str, Any], key: bytes | None, *, ensure_ascii: bool) -> bytes:
    key = key if key is not None else hmac_key()
    if key:
        doc[HMAC_FIELD] = _signature(doc, key)
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=ensure_ascii).encode("utf-8")


def _check_signature(doc: dict[str, Any], key: bytes | None, fmt: str) -> None:
    key = key if key is not None else hmac_key()
    if not key:
        return
    got = doc.get(HMAC_FIELD)
    if not isinstance(got, str):
        raise SignatureError(
            f"{HMAC_ENV} is set but this {fmt} document carries no HMAC (written without the key, or tampered)"
        )
    if not hmac.compare_digest(got.encode("ascii", "replace"), _signature(doc, key).encode("ascii")):
        raise SignatureError(f"HMAC of this {fmt} document does not match: tampered, or written with another key")


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
    version: int = FORMAT_VERSION
    segments: list[int] = field(default_factory=lambda: [0])
    _starts: list[int] | None = field(default=None, repr=False, compare=False)

    def starts(self) -> list[int]:
        """Start offset of every checksum chunk (ascending)."""
        if self._starts is None:
            self._starts = chunk_starts(self.shard_size, self.chunk_size, self.segments)
        return self._starts

    def to_json(self, key: bytes | None = None) -> bytes:
        """The stored bytes; signed with ``key`` (default: the configured HMAC key, if any)."""
        doc: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "version": FORMAT_VERSION,
            "step": self.step,
            "rank": self.rank,
            "world_size": self.world_size,
            "attempt": self.attempt,
            "created": self.created,
            "host": self.host,
            "shard": {
                "key": self.shard_key,
                "size": self.shard_size,
                "checksum": {
                    "algorithm": self.algorithm,
                    "chunk_size": self.chunk_size,
                    "segments": self.segments,
                    "chunks": self.chunks,
                },
            },
            "tensor_count": self.tensor_count,
            "tree": self.tree,
        }
        return _seal(doc, key, ensure_ascii=False)


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

    def to_json(self, key: bytes | None = None) -> bytes:
        """The stored bytes; signed with ``key`` (default: the configured HMAC key, if any)."""
        doc: dict[str, Any] = {
            "format": MARKER_FORMAT,
            "version": FORMAT_VERSION,
            "step": self.step,
            "world_size": self.world_size,
            "attempt": self.attempt,
            "created": self.created,
            "total_bytes": self.total_bytes,
            "shards": [asdict(s) for s in self.shards],
        }
        return _seal(doc, key, ensure_ascii=True)


def _int(doc: dict[str, Any], name: str, lo: int = 0, hi: int = MAX_OBJECT_BYTES) -> int:
    v = doc.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"field {name!r} must be an int in [{lo}, {hi}], got {str(v)[:40]}")
    return v


def _created(doc: dict[str, Any]) -> float:
    v = doc.get("created", 0.0)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return 0.0
    try:
        return float(v)
    except OverflowError:
        return 0.0


def _str(doc: dict[str, Any], name: str) -> str:
    v = doc.get(name)
    if not isinstance(v, str):
        raise ValueError(f"field {name!r} must be a string, got {type(v).__name__}")
    return v


def _doc(data: bytes, fmt: str, key: bytes | None = None) -> dict[str, Any]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise ValueError(f"not a {fmt} document")
    version = doc.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise ValueError(
            f"format version {str(version)[:20]} is not supported (this clusterctl reads "
            f"{', '.join(map(str, READABLE_VERSIONS))})"
        )
    _check_signature(doc, key, fmt)
    return doc


def load_manifest(data: bytes, *, key: bytes | None = None) -> ShardManifest:
    """Parse and check a shard manifest (and its HMAC when a key is configured). Raises ValueError."""
    doc = _doc(data, MANIFEST_FORMAT, key)
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
    m = ShardManifest(
        step=_int(doc, "step"),
        rank=_int(doc, "rank", 0, MAX_WORLD_SIZE),
        world_size=_int(doc, "world_size", 1, MAX_WORLD_SIZE),
        attempt=_str(doc, "attempt"),
        shard_key=_str(shard, "key"),
        shard_size=_int(shard, "size"),
        chunk_size=_int(ck, "chunk_size", 1),
        chunks=chunks,
        tree=tree,
        tensor_count=_int(doc, "tensor_count"),
        created=_created(doc),
        host=str(doc.get("host", ""))[:256],
        version=int(doc["version"]),
    )
    segments = ck.get("segments", [0])
    if (
        not isinstance(segments, list)
        or not segments
        or segments[0] != 0
        or len(segments) > len(chunks) + 1
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in segments)
        or any(b <= a for a, b in itertools.pairwise(segments))
        or (len(segments) > 1 and segments[-1] >= m.shard_size)
    ):
        raise ValueError("field 'segments' must be ascending offsets inside the shard, starting at 0")
    m.segments = segments
    if len(chunks) != sum(
        -(-(b - a) // m.chunk_size) for a, b in zip(segments, [*segments[1:], m.shard_size], strict=True)
    ):
        raise ValueError(f"{len(chunks)} chunk checksums do not cover {m.shard_size} bytes")
    return m


def load_marker(data: bytes, *, key: bytes | None = None) -> CommitMarker:
    """Parse and check a commit marker (and its HMAC when a key is configured). Raises ValueError."""
    doc = _doc(data, MARKER_FORMAT, key)
    shards = doc.get("shards")
    if not isinstance(shards, list):
        raise ValueError("field 'shards' must be a list")
    entries = []
    for s in shards:
        if not isinstance(s, dict):
            raise ValueError("shard entry is not an object")
        entries.append(
            ShardEntry(
                _int(s, "rank", 0, MAX_WORLD_SIZE),
                _str(s, "manifest_key"),
                _int(s, "manifest_size", 0, MAX_MANIFEST_BYTES),
                _str(s, "manifest_xxh3_64"),
                _int(s, "shard_size"),
            )
        )
    m = CommitMarker(
        _int(doc, "step"), _int(doc, "world_size", 1, MAX_WORLD_SIZE), _str(doc, "attempt"), _created(doc), entries
    )
    if len(entries) != m.world_size:  # before building range(world_size) from a declared number
        raise ValueError(f"marker lists {len(entries)} shard(s) for world size {m.world_size}")
    if sorted(e.rank for e in entries) != list(range(m.world_size)):
        raise ValueError(f"marker lists ranks {[e.rank for e in entries]}, expected 0..{m.world_size - 1}")
    return m
