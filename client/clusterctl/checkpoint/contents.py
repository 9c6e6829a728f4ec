"""Looking inside one committed step: what each leaf is (``show``) and its full tensors (``export``).

``describe_step`` reads the marker and every rank's manifest (no shard bytes) and reports, per
tensor leaf, its layout (sharded / replicated / rank-local), dtype, global shape and stored bytes.
``export_step`` rebuilds every sharded and replicated leaf as its whole global array (rank-local
leaves: rank 0's value), reading through the same verified ranged reads as a restore, and writes
one safetensors file per top-level key of the state (named by :func:`file_stem`).
"""

from __future__ import annotations

import json
import os
import string
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..storage import Storage
from .assemble import Assembler, Path, finish, index_tree, leaf_dtype, leaf_shape, show_path
from .errors import CorruptCheckpointError
from .restore import StepReader, check_structure, read_marker
from .shard import plan_shard
from .tree import flatten


@dataclass
class LeafInfo:
    """One tensor leaf of a step, as ``clusterctl checkpoints show`` prints it."""

    path: str
    layout: str  # "sharded", "replicated" or "rank-local"
    dtype: str
    shape: list[int]
    bytes: int
    ranks: list[int] = field(default_factory=list)  # ranks that store bytes of it


def _layouts(tree: Any, path: Path = (), replicated: bool = False) -> dict[Path, str]:
    out: dict[Path, str] = {}
    stack: list[tuple[Any, Path, bool]] = [(tree, path, replicated)]
    while stack:
        node, p, rep = stack.pop()
        kind = node.get("t") if isinstance(node, dict) else None
        if kind == "replicated":
            stack.append((node.get("v"), p, True))
        elif kind in ("map", "dict", "list", "tuple"):
            items = node["items"]
            pairs = items.items() if isinstance(items, dict) else (items if kind == "map" else enumerate(items))
            stack.extend((child, (*p, key), rep) for key, child in pairs)
        elif kind == "sharded":
            out[p] = "sharded"
        elif kind not in ("json", "alias"):  # an alias is stored (and listed) at the path it names
            out[p] = "replicated" if rep else "rank-local"
    return out


def describe_step(storage: Storage, step: int, *, executor: Executor | None = None) -> list[LeafInfo]:
    """Every tensor leaf of a committed step (reads the marker and the manifests only).

    Raises:
        CorruptCheckpointError: the step's marker or manifests fail verification.
    """
    marker = read_marker(storage, step)
    check_structure(storage, marker)
    reader = StepReader(storage, marker, executor)
    infos: dict[Path, LeafInfo] = {}
    try:
        for rank in range(marker.world_size):
            tree = reader.tree(rank)
            layouts = _layouts(tree)
            for path, node in index_tree(tree).items():
                kind = layouts.get(path)
                if kind is None:
                    continue
                inner = node["v"] if kind == "sharded" else node
                shape = list(node["gshape"]) if kind == "sharded" else list(leaf_shape(inner))
                dtype = inner.get("dtype") if inner.get("t") == "torch" else str(leaf_dtype(inner))
                info = infos.setdefault(path, LeafInfo(show_path(path), kind, str(dtype), shape, 0))
                if kind == "rank-local" and info.shape != shape:
                    info.shape = []  # differs between ranks
                if "off" in inner and not inner.get("dup"):
                    begin, end = inner["off"]
                    info.bytes += end - begin
                    info.ranks.append(rank)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        raise CorruptCheckpointError(f"step {step}: manifests cannot be read: {exc}", step=step) from None
    return [infos[p] for p in sorted(infos, key=show_path)]


def export_step(storage: Storage, step: int, directory: str, *, executor: Executor | None = None) -> list[str]:
    """Write the step's full tensors as ``<directory>/<top-level key>.safetensors``; return the files.

    A list or tuple state gives ``0.safetensors``, ``1.safetensors``, ...; see :func:`file_stem`.

    Raises:
        ValueError: two top-level keys would share a file name (``1`` and ``"1"``).
        CorruptCheckpointError: a chunk fails its checksum, or the manifests are malformed.
        OSError: the directory cannot be written.
    """
    marker = read_marker(storage, step)
    check_structure(storage, marker)
    reader = StepReader(storage, marker, executor)
    try:
        asm = Assembler(
            tree=reader.tree,
            want=reader.ranges.want,
            view=reader.ranges.view,
            base_rank=0,
            saved_world=marker.world_size,
            rank=0,
            world_size=1,
            foreign=marker.world_size != 1,
            rank_local="rank0",
            step=step,
        )
        state = asm.plan(reader.tree(0), None)
        reader.ranges.fetch()
        state = finish(state)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError) as exc:
        raise CorruptCheckpointError(f"step {step}: cannot be decoded: {exc}", step=step) from None
    entries = _export_files(state)
    os.makedirs(directory, exist_ok=True)
    written = []
    for stem, key, value in entries:
        _, leaves = flatten({"v": value}, aliases=False)  # every key in the file, tied ones too
        if not leaves:
            continue
        for leaf in leaves:
            leaf.name = leaf.name.removeprefix("v/") if leaf.name != "v" else str(key)
        plan = plan_shard(
            leaves,
            {
                "format": "clusterctl.checkpoint.export",
                "step": str(step),
                "dtypes": json.dumps({leaf.name: leaf.node.get("dtype") for leaf in leaves}),
            },
        )
        path = os.path.join(directory, f"{stem}.safetensors")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(plan.header)
            for leaf, _ in plan.slots:
                if leaf.nbytes and leaf.array is not None:
                    f.write(np.ascontiguousarray(leaf.array).reshape(-1).view(np.uint8).data)
        written.append(path)
    return written


_SAFE = frozenset(string.ascii_letters + string.digits + "_-.")


def file_stem(key: object) -> str:
    """The file name (without ``.safetensors``) of a top-level key: ``model`` stays ``model``.

    Any other character is %-escaped (UTF-8 bytes, ``%`` itself too) and a leading ``.`` is
    ``%2E``, so distinct string keys never share a file (``a/b`` -> ``a%2Fb``, ``a_b`` -> ``a_b``)
    and no name can leave the directory or hide in it. The empty key is ``%``.
    """
    text = str(key)
    if not text:
        return "%"
    out = "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass")) for c in text)
    return "%2E" + out[1:] if out.startswith(".") else out


def _export_files(state: Any) -> list[tuple[str, Any, Any]]:
    """``(file stem, key, value)`` per top-level entry: a mapping's keys, a list's or tuple's
    indexes, or one ``state`` file for a bare value.

    Raises:
        ValueError: two keys with the same name (``1`` and ``"1"``), naming both (exit 2).
    """
    if isinstance(state, Mapping):
        pairs: list[tuple[Any, Any]] = list(state.items())
    elif isinstance(state, (list, tuple)):
        pairs = list(enumerate(state))
    else:
        pairs = [("state", state)]
    seen: dict[str, Any] = {}
    out = []
    for key, value in pairs:
        stem = file_stem(key)
        if stem in seen:
            raise ValueError(
                f"top-level keys {seen[stem]!r} and {key!r} would both be written to "
                f"{stem}.safetensors; export cannot keep both"
            )
        seen[stem] = key
        out.append((stem, key, value))
    return out
