"""Rebuilding a rank's state from the trees of a committed step, at the layout wanted now.

Two passes over the saved tree: :meth:`Assembler.plan` walks it (with the caller's template, if
any), decides for every leaf which saved rank's bytes it needs and registers those byte ranges
with the :class:`~.ranges.RangeReader`; after one verified fetch, :func:`finish` builds the
values. A sharded leaf is cut from the pieces of every saved rank that overlap the slice this
rank wants; a replicated leaf is read from the rank that stored it; a rank-local leaf is read from
this rank's own shard, and at another world size it is an error naming the key unless the caller
chose a ``rank_local`` policy. Everything read from a manifest is untrusted: malformed nodes raise
ValueError (turned into CorruptCheckpointError by the caller).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import torchcompat
from .errors import RestoreError, WorldSizeMismatchError
from .parallel import Box, Replicated, Sharded, even_box, flat_span, intersect, volume
from .tree import np_dtype_from_spec

RankLocalPolicy = Literal["error", "rank0", "drop"]
Path = tuple[str | int, ...]
TENSOR_KINDS = ("ndarray", "npscalar", "torch", "bytes", "bytearray")
MAX_NDIM = 64


class Pending:
    """A leaf whose bytes are being fetched; ``build()`` makes its value afterwards (once: an alias
    of the leaf gets the very same object)."""

    __slots__ = ("_build", "_value")

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build: Callable[[], Any] | None = build
        self._value: Any = None

    def build(self) -> Any:
        if self._build is not None:
            self._value, self._build = self._build(), None
        return self._value


DROP = object()  # a rank-local leaf left out by ``rank_local="drop"``


def show_path(path: Path) -> str:
    return "/".join(str(k) for k in path) or "/"


def _shape(node: dict[str, Any], field: str = "shape") -> tuple[int, ...]:
    shape = node.get(field)
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_NDIM
        or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 62 for d in shape)
    ):
        raise ValueError(f"bad {field} {str(shape)[:80]}")
    return tuple(shape)


def leaf_dtype(node: dict[str, Any]) -> np.dtype[Any]:
    """The numpy dtype whose bytes the leaf holds (torch dtypes: a same-size numpy dtype)."""
    kind = node.get("t")
    if kind in ("bytes", "bytearray"):
        return np.dtype(np.uint8)
    if kind == "torch":
        name = node.get("dtype")
        if not isinstance(name, str) or name not in torchcompat.TORCH_DTYPES:
            raise ValueError(f"unknown torch dtype {str(name)[:40]}")
        return np.dtype(torchcompat.TORCH_DTYPES[name][1])
    return np_dtype_from_spec(node.get("dtype"))


def leaf_shape(node: dict[str, Any]) -> tuple[int, ...]:
    if node.get("t") in ("bytes", "bytearray") and "shape" not in node:  # format 1
        return (-1,)
    return _shape(node)


def leaf_span(node: dict[str, Any]) -> tuple[int, int]:
    """The node's byte range in its shard, checked against its dtype and shape."""
    off = node.get("off")
    if (
        not isinstance(off, list)
        or len(off) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in off)
    ):
        raise ValueError(f"bad byte range {str(off)[:80]}")
    begin, end = off
    dtype = leaf_dtype(node)
    shape = leaf_shape(node)
    if shape != (-1,) and math.prod(shape) * dtype.itemsize != end - begin:
        raise ValueError(f"{end - begin} bytes do not match dtype {dtype} and shape {list(shape)}")
    if begin % min(8, max(1, dtype.alignment)):
        raise ValueError(f"byte offset {begin} is not aligned for {dtype}")
    return begin, end


def materialize(node: dict[str, Any], raw: np.ndarray, shape: tuple[int, ...], torch: Any) -> Any:
    """The value of a tensor leaf from its verified bytes (a view, no copy)."""
    kind = node["t"]
    if kind in ("bytes", "bytearray"):
        return bytes(raw) if kind == "bytes" else bytearray(raw)
    dtype = leaf_dtype(node)
    if math.prod(shape) * dtype.itemsize != raw.nbytes:
        raise ValueError(f"{raw.nbytes} bytes do not match dtype {dtype} and shape {list(shape)}")
    if kind == "torch":
        if torch is None:  # no torch installed: the same bytes as the closest numpy dtype
            return raw.view(dtype).reshape(shape)
        return torchcompat.tensor_from_bytes(torch, raw, node["dtype"], list(shape))
    arr = raw.view(dtype).reshape(shape)
    return arr[()] if kind == "npscalar" else arr


def index_tree(tree: Any) -> dict[Path, dict[str, Any]]:
    """Every leaf node of a tree by its path (replicated wrappers are transparent)."""
    out: dict[Path, dict[str, Any]] = {}
    stack: list[tuple[Any, Path]] = [(tree, ())]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            raise ValueError(f"{show_path(path)}: malformed tree node")
        kind = node.get("t")
        if kind == "replicated":
            stack.append((node.get("v"), path))
        elif kind in ("map", "dict", "list", "tuple"):
            stack.extend((child, (*path, key)) for key, child in _children(node))
        else:
            out[path] = node
    return out


def _children(node: dict[str, Any]) -> list[tuple[str | int, Any]]:
    kind, items = node.get("t"), node.get("items")
    if kind == "map":
        if not isinstance(items, list) or not all(
            isinstance(i, list) and len(i) == 2 and isinstance(i[0], str | int) and not isinstance(i[0], bool)
            for i in items
        ):
            raise ValueError("malformed map node")
        return [(k, v) for k, v in items]
    if kind == "dict":
        if not isinstance(items, dict):
            raise ValueError("malformed dict node")
        return list(items.items())
    if not isinstance(items, list):
        raise ValueError(f"malformed {kind} node")
    return list(enumerate(items))


class Assembler:
    """Plans the reads of one rank's restore of one step and builds the result."""

    def __init__(
        self,
        *,
        tree: Callable[[int], dict[str, Any]],
        want: Callable[..., None],
        view: Callable[[int, int, int], np.ndarray],
        base_rank: int,
        saved_world: int,
        rank: int,
        world_size: int,
        foreign: bool,
        rank_local: RankLocalPolicy,
        step: int,
    ) -> None:
        self._tree = tree
        self._want = want
        self._view = view
        self._indexes: dict[int, dict[Path, dict[str, Any]]] = {}
        self._planned: dict[Path, Any] = {}  # tensor leaves planned so far, for aliases
        self.base_rank = base_rank
        self.saved_world = saved_world
        self.rank = rank
        self.world_size = world_size
        self.foreign = foreign
        self.rank_local = rank_local
        self.step = step
        self._torch: Any = None
        self._torch_loaded = False

    def torch(self) -> Any:
        if not self._torch_loaded:
            self._torch, self._torch_loaded = torchcompat.import_torch(), True
        return self._torch

    def index(self, rank: int) -> dict[Path, dict[str, Any]]:
        if rank not in self._indexes:
            self._indexes[rank] = index_tree(self._tree(rank))
        return self._indexes[rank]

    def node_at(self, rank: int, path: Path) -> dict[str, Any]:
        node = self.index(rank).get(path)
        if node is None:
            raise ValueError(f"{show_path(path)}: not in the tree of rank {rank}")
        return node

    # --- pass 1 ----------------------------------------------------------------------------
    def plan(self, node: Any, template: Any, path: Path = (), replicated: bool = False) -> Any:
        if not isinstance(node, dict):
            raise ValueError(f"{show_path(path)}: malformed tree node")
        if isinstance(template, Replicated):
            template = template.value
        kind = node.get("t")
        if kind in ("map", "dict"):
            out: dict[Any, Any] = {}
            for key, child in _children(node):
                sub = template.get(key) if isinstance(template, Mapping) else None
                value = self.plan(child, sub, (*path, key), replicated)
                if value is not DROP:
                    out[key] = value
            return out
        if kind in ("list", "tuple"):
            subs = template if isinstance(template, list | tuple) else ()
            items = [
                self.plan(child, subs[i] if isinstance(i, int) and i < len(subs) else None, (*path, i), replicated)
                for i, child in _children(node)
            ]
            items = [None if v is DROP else v for v in items]
            return tuple(items) if kind == "tuple" else items
        if kind == "replicated":
            return self.plan(node.get("v"), template, path, True)
        if kind == "json":
            if (
                self.foreign
                and not replicated
                and any(self.index(r).get(path) != node for r in range(self.saved_world))
            ):
                return self._rank_local(path, lambda: node.get("v"))
            return node.get("v")
        if kind == "alias":
            return self._alias(node, path)
        if kind == "sharded":
            value = self._planned[path] = self._plan_sharded(node, template, path)
            return value
        if kind in TENSOR_KINDS:
            value = self._planned[path] = self._plan_leaf(node, template, path, replicated)
            return value
        raise ValueError(f"{show_path(path)}: unknown tree node type {str(kind)[:40]}")

    def _alias(self, node: dict[str, Any], path: Path) -> Any:
        of = node.get("of")
        if not isinstance(of, list) or not all(isinstance(k, str | int) and not isinstance(k, bool) for k in of):
            raise ValueError(f"{show_path(path)}: malformed alias node")
        target = tuple(of)
        if target not in self._planned:
            raise ValueError(f"{show_path(path)}: alias of {show_path(target)}, which is not an earlier tensor")
        return self._planned[target]

    def _rank_local(self, path: Path, value: Callable[[], Any]) -> Any:
        if self.rank_local == "drop":
            return DROP
        if self.rank_local == "rank0":
            return value()
        raise WorldSizeMismatchError(
            f"step {self.step}: {show_path(path)!r} is rank-local (neither Sharded nor Replicated nor a DTensor) "
            f"and was saved by {self.saved_world} rank(s) but {self.world_size} are restoring it: it cannot be "
            "mapped; wrap it in Replicated(...) or Sharded(...) when saving, or restore with "
            "rank_local='rank0' (take rank 0's value) or rank_local='drop'",
            saved=self.saved_world,
            current=self.world_size,
        )

    def _stored(self, node: dict[str, Any], path: Path, replicated: bool) -> tuple[int, dict[str, Any]]:
        """(saved rank, node with ``off``) of a tensor leaf of the base tree."""
        if node.get("dup"):
            raise ValueError(f"{show_path(path)}: duplicate marker outside a sharded leaf")
        if "rank" in node:
            src = node["rank"]
            if not replicated or isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < self.saved_world:
                raise ValueError(f"{show_path(path)}: bad writer rank {str(src)[:20]}")
            stored = self.node_at(src, path)
            if (stored.get("t"), stored.get("dtype"), stored.get("shape")) != (
                node.get("t"),
                node.get("dtype"),
                node.get("shape"),
            ) or "off" not in stored:
                raise ValueError(f"{show_path(path)}: rank {src} stores another tensor")
            return src, stored
        return self.base_rank, node

    def _plan_leaf(self, node: dict[str, Any], template: Any, path: Path, replicated: bool) -> Any:
        src, stored = self._stored(node, path, replicated)
        begin, end = leaf_span(stored)
        if node["t"] == "torch":
            self.torch()
        wanted = self._template_box(template, leaf_shape(node), path)
        if wanted is not None:  # a whole saved tensor cut to the slice the template asks for
            return self._plan_pieces(
                node, [(src, ((0,) * len(leaf_shape(node)), leaf_shape(node)), begin)], wanted, template, path
            )
        if self.foreign and not replicated:
            return self._rank_local(path, lambda: self._plan_read(node, src, begin, end))
        return self._plan_read(node, src, begin, end)

    def _plan_read(self, node: dict[str, Any], src: int, begin: int, end: int) -> Pending:
        self._want(src, begin, end)
        shape = (end - begin,) if leaf_shape(node) == (-1,) else leaf_shape(node)
        return Pending(lambda: materialize(node, self._view(src, begin, end), shape, self._torch))

    def _template_box(self, template: Any, gshape: tuple[int, ...], path: Path) -> Box | None:
        # A template the caller built wrong is the caller's error, raised at once: as a ValueError
        # it would read as a corrupt step, and restore would fall back past every valid one.
        try:
            if isinstance(template, Sharded):
                box = template.box()
                tshape = tuple(int(d) for d in template.global_shape)
            elif torchcompat.is_dtensor(template):
                tg, tl, to = torchcompat.dtensor_box(template)
                box, tshape = (tuple(to), tuple(tl)), tuple(tg)
            else:
                return None
        except (ValueError, TypeError, AttributeError) as exc:
            raise RestoreError(f"template at {show_path(path)!r}: {exc}") from None
        if tshape != gshape:
            raise RestoreError(
                f"template at {show_path(path)!r} has global shape {list(tshape)}, the checkpoint "
                f"of step {self.step} has {list(gshape)}"
            )
        return box

    def _plan_sharded(self, node: dict[str, Any], template: Any, path: Path) -> Any:
        gshape = _shape(node, "gshape")
        inner = node.get("v")
        if not isinstance(inner, dict) or inner.get("t") not in ("ndarray", "torch"):
            raise ValueError(f"{show_path(path)}: malformed sharded node")
        if inner["t"] == "torch":
            self.torch()
        own = (tuple(_shape(node, "offset")), leaf_shape(inner))
        wanted = self._template_box(template, gshape, path)
        if wanted is None:
            wanted = own if not self.foreign else even_box(gshape, self.rank, self.world_size)
        if wanted == own and not inner.get("dup") and not self.foreign:
            pieces = [(self.base_rank, own, leaf_span(inner)[0])]  # our own piece: no other manifest needed
        else:
            pieces = self._pieces(path, gshape, inner)
        return self._plan_pieces(inner, pieces, wanted, template, path)

    def _pieces(self, path: Path, gshape: tuple[int, ...], like: dict[str, Any]) -> list[tuple[int, Box, int]]:
        """(saved rank, box, byte offset) of every stored piece of a sharded leaf, distinct boxes only."""
        out: dict[Box, tuple[int, Box, int]] = {}
        for r in range(self.saved_world):
            n = self.node_at(r, path)
            inner = n.get("v")
            if (
                n.get("t") != "sharded"
                or _shape(n, "gshape") != gshape
                or not isinstance(inner, dict)
                or (inner.get("t"), inner.get("dtype")) != (like.get("t"), like.get("dtype"))
            ):
                raise ValueError(f"{show_path(path)}: rank {r} saved another array here")
            if inner.get("dup"):
                continue
            off = _shape(n, "offset")
            box = (off, leaf_shape(inner))
            if len(off) != len(gshape) or any(o + s > g for o, s, g in zip(off, box[1], gshape, strict=True)):
                raise ValueError(f"{show_path(path)}: rank {r}'s piece lies outside the global shape")
            out.setdefault(box, (r, box, leaf_span(inner)[0]))
        pieces = list(out.values())
        for i, (_, a, _) in enumerate(pieces):
            for _, b, _ in pieces[i + 1 :]:
                if volume(a) and volume(b) and intersect(a, b) is not None:
                    raise ValueError(f"{show_path(path)}: saved pieces overlap")
        return pieces

    def _plan_pieces(
        self, node: dict[str, Any], pieces: list[tuple[int, Box, int]], wanted: Box, template: Any, path: Path
    ) -> Pending:
        dtype = leaf_dtype(node)
        target = _in_place_target(template, node, wanted[1])
        parts = []
        for src, box, begin in pieces:
            inter = intersect(wanted, box)
            if inter is None:
                continue
            lo = tuple(o - p for o, p in zip(inter[0], box[0], strict=True))
            first, last = flat_span(box[1], lo, inter[1])
            b, e = begin + first * dtype.itemsize, begin + last * dtype.itemsize
            into = None
            if target is not None and inter[1][1:] == box[1][1:] == wanted[1][1:]:  # contiguous in both
                t0, t1 = flat_span(wanted[1], tuple(o - w for o, w in zip(inter[0], wanted[0], strict=True)), inter[1])
                into = target[t0 * dtype.itemsize : t1 * dtype.itemsize]
            self._want(src, b, e, into)
            parts.append((src, box, inter, b, e))
        if sum(volume(p[2]) for p in parts) != volume(wanted):
            raise ValueError(
                f"{show_path(path)}: the saved pieces do not cover the wanted slice "
                f"(offset {list(wanted[0])}, shape {list(wanted[1])})"
            )

        def build() -> Any:
            shape = wanted[1]
            if target is None and len(parts) == 1 and parts[0][1] == wanted:  # one saved piece: a view, no copy
                raw = self._view(parts[0][0], parts[0][3], parts[0][4])
            else:
                raw = target if target is not None else np.empty(math.prod(shape) * dtype.itemsize, dtype=np.uint8)
                out = raw.view(np.dtype(f"V{dtype.itemsize}")).reshape(shape) if dtype.itemsize else None
                for src, box, inter, b, e in parts:
                    if out is None or not volume(inter):
                        continue
                    source = self._view(src, b, e)
                    if target is not None and np.shares_memory(source, target):
                        continue  # read straight into the caller's tensor
                    flat = source.view(out.dtype)
                    strides = tuple(math.prod(box[1][i + 1 :]) * dtype.itemsize for i in range(len(box[1])))
                    piece = as_strided(flat, shape=inter[1], strides=strides, writeable=False)
                    at = tuple(slice(o - w, o - w + n) for o, w, n in zip(inter[0], wanted[0], inter[1], strict=True))
                    out[at] = piece
            if target is not None:  # filled the caller's own tensor in place
                return template if torchcompat.is_dtensor(template) else template.local
            value = materialize(node, raw, shape, self._torch)
            if torchcompat.is_dtensor(template):
                return torchcompat.make_dtensor(value, template)
            return value

        return Pending(build)


def _in_place_target(template: Any, node: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray | None:
    """The bytes of the template's own local tensor when the restored slice can go straight into it
    (same dtype and shape, CPU, contiguous, writable): no allocation, no page faults, as DCP loads."""
    if torchcompat.is_dtensor(template):
        local = template.to_local()
    elif isinstance(template, Sharded):
        local = template.local
    else:
        return None
    if isinstance(local, np.ndarray):
        if (
            node.get("t") != "ndarray"
            or local.shape != shape
            or local.dtype != leaf_dtype(node)
            or not local.flags.c_contiguous
            or not local.flags.writeable
        ):
            return None
        return local.reshape(-1).view(np.uint8)
    if not torchcompat.is_tensor(local) or node.get("t") != "torch":
        return None
    if (
        torchcompat.dtype_name(local) != node.get("dtype")
        or tuple(local.shape) != shape
        or local.device.type != "cpu"
        or not local.is_contiguous()
        or local.requires_grad
    ):
        return None
    return torchcompat.cpu_bytes_view(local).reshape(-1).view(np.uint8)


def finish(value: Any) -> Any:
    """Replace every :class:`Pending` leaf by its built value (after the fetch)."""
    if isinstance(value, Pending):
        return value.build()
    if isinstance(value, dict):
        return {k: finish(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finish(v) for v in value]
    if isinstance(value, tuple):
        return tuple(finish(v) for v in value)
    return value
