"""Flattening a nested state into tensor leaves plus a JSON tree (format 2). No pickle anywhere.

Supported: mappings with str or int keys, lists, tuples, numpy arrays and scalars, torch tensors
(when torch is imported by the caller) incl. DTensors, bytes/bytearray (stored as uint8
tensors), JSON values (None, bool, int, float incl. inf/nan, str), and the layouts
:class:`~.parallel.Sharded` / :class:`~.parallel.Replicated`. Anything else raises
:class:`InvalidStateError` naming its path: saving it would need pickle.

Tree nodes (the ``tree`` field of a shard manifest, FORMAT.md)::

    {"t": "map", "items": [[key, node], ...]}      key: str or int, in the state's order
    {"t": "list"|"tuple", "items": [node, ...]}    {"t": "json", "v": value}
    {"t": "ndarray"|"npscalar", "dtype": numpy dtype (str or descr list), "shape": [...], <where>}
    {"t": "torch", "dtype": "bfloat16", "shape": [...], "device": "cuda:0", <where>}
    {"t": "bytes"|"bytearray", "shape": [n], <where>}
    {"t": "replicated", "v": node}                 the same on every rank; each leaf stored once
    {"t": "sharded", "gshape": [...], "offset": [...], "v": tensor node}   a piece of a global array
    {"t": "alias", "of": [key, ...]}              the same tensor as at that earlier path (tied weights)

``<where>`` is ``"name": tensor, "off": [begin, end]`` (absolute byte range in this rank's shard),
or ``"rank": r`` (stored in rank r's shard at the same path), or ``"dup": true`` (a sharded piece
that another replica stored). Format 1 trees (``{"t": "dict", "items": {str: node}}``, tensor
nodes with ``name`` only) are still read. Tensor names are the leaf's path, keys escaped as in
JSON Pointer (``~`` -> ``~0``, ``/`` -> ``~1``) and joined with ``/``, e.g. ``model/layers/0/weight``.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import torchcompat
from .errors import InvalidStateError
from .parallel import Replicated, Sharded, writer_rank

# numpy dtypes that safetensors names natively (little-endian only)
NUMPY_TO_ST: dict[str, str] = {
    "|b1": "BOOL",
    "|i1": "I8",
    "|u1": "U8",
    "<i2": "I16",
    "<u2": "U16",
    "<i4": "I32",
    "<u4": "U32",
    "<i8": "I64",
    "<u8": "U64",
    "<f2": "F16",
    "<f4": "F32",
    "<f8": "F64",
    "<c8": "C64",
}
ST_ITEMSIZE: dict[str, int] = {
    "BOOL": 1,
    "I8": 1,
    "U8": 1,
    "I16": 2,
    "U16": 2,
    "I32": 4,
    "U32": 4,
    "I64": 8,
    "U64": 8,
    "F16": 2,
    "BF16": 2,
    "F32": 4,
    "F64": 8,
    "C64": 8,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}


@dataclass
class TensorLeaf:
    """One tensor to write: where it comes from and how it is described in the shard header.

    ``array`` is a numpy view of the source bytes (no copy) or None for a CUDA tensor (``source``).
    ``st_dtype``/``st_shape`` are what the safetensors header says (raw dtypes are ``U8`` of nbytes).
    """

    name: str
    array: np.ndarray | None
    source: Any
    st_dtype: str
    st_shape: list[int]
    nbytes: int
    alignment: int
    node: dict[str, Any]  # its tree node, which gets ``off`` once the shard is laid out


def check_state_key(key: object, path: str) -> str | int:
    """Validate a mapping key of the state (they become tensor names that tools may map to files)."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key  # torch optimizer state is keyed by int parameter ids
    if not isinstance(key, str):
        raise InvalidStateError(f"state keys must be str or int, got {type(key).__name__} at {path or '/'}")
    where = f"{path}/{key}" if path else key
    if key == "" or key in (".", ".."):
        raise InvalidStateError(f"state key {key!r} at {where!r} is refused (empty, '.' or '..')")
    if "\\" in key:
        raise InvalidStateError(f"state key {key!r} contains a backslash")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in key):
        raise InvalidStateError(f"state key {key!r} contains a control character")
    if key.startswith("/") or any(seg == ".." for seg in key.split("/")):
        raise InvalidStateError(f"state key {key!r} is absolute or has a '..' segment (path traversal refused)")
    return key


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _dtype_spec(dtype: np.dtype[Any]) -> Any:
    return dtype.descr if dtype.fields is not None else dtype.str


def _is_json_scalar(v: object) -> bool:
    return v is None or isinstance(v, bool | int | str | float)


def _json_value(v: object) -> bool:
    if _is_json_scalar(v):
        return True
    if isinstance(v, list):
        return all(_json_value(x) for x in v)
    return False


class Flattener:
    """Walks a state once, collecting this rank's tensor leaves and building the JSON tree."""

    def __init__(self, rank: int = 0, world_size: int = 1, *, aliases: bool = True) -> None:
        self.aliases = aliases
        self.rank = rank
        self.world_size = world_size
        self.leaves: list[TensorLeaf] = []
        self._names: set[str] = set()
        self._seen: dict[tuple[Any, ...], tuple[str | int, ...]] = {}  # a tensor's view -> its first path
        self._boxes: torchcompat.Boxes = {}

    def _name(self, path: str) -> str:
        name = base = path or "__root__"
        n = 1
        while name == "__metadata__" or name in self._names:  # int key 0 beside str key "0"
            n += 1
            name = f"{base}~{n}"
        self._names.add(name)
        return name

    def _add(
        self,
        node: dict[str, Any],
        path: str,
        array: np.ndarray | None,
        source: Any,
        st: str,
        st_shape: list[int],
        nbytes: int,
        alignment: int,
    ) -> None:
        name = node["name"] = self._name(path)
        self.leaves.append(TensorLeaf(name, array, source, st, st_shape, nbytes, alignment, node))

    def _array_leaf(self, arr: np.ndarray, path: str, kind: str, where: dict[str, Any] | None) -> dict[str, Any]:
        if arr.dtype.hasobject:
            raise InvalidStateError(f"{path or '/'}: object arrays cannot be saved without pickle")
        node: dict[str, Any] = {"t": kind, "dtype": _dtype_spec(arr.dtype), "shape": [int(d) for d in arr.shape]}
        if where is not None:
            return node | where
        st = NUMPY_TO_ST.get(arr.dtype.str)
        if st is not None:
            st_shape = [int(d) for d in arr.shape]
        else:  # raw bytes with the exact numpy dtype recorded in the tree
            st, st_shape = "U8", [int(arr.nbytes)]
        self._add(node, path, arr, arr, st, st_shape, int(arr.nbytes), min(8, max(1, arr.dtype.alignment)))
        return node

    def _torch_leaf(self, t: Any, path: str, where: dict[str, Any] | None) -> dict[str, Any]:
        dname = torchcompat.dtype_name(t)
        if dname not in torchcompat.TORCH_DTYPES:
            raise InvalidStateError(f"{path or '/'}: torch dtype {dname} is not supported")
        shape = [int(d) for d in t.shape]
        node: dict[str, Any] = {"t": "torch", "dtype": dname, "shape": shape, "device": str(t.device)}
        if where is not None:
            return node | where
        st, np_dtype = torchcompat.TORCH_DTYPES[dname]
        itemsize = np.dtype(np_dtype).itemsize
        nbytes = math.prod(shape) * itemsize
        st_shape = shape
        if st is None:
            st, st_shape = "U8", [nbytes]
        array = None if t.device.type != "cpu" else torchcompat.cpu_bytes_view(t)
        self._add(node, path, array, t, st, st_shape, nbytes, min(8, itemsize))
        return node

    def _tensor(self, value: Any, path: str, where: dict[str, Any] | None) -> dict[str, Any] | None:
        """The node of an array-like leaf, or None when ``value`` is not one."""
        if isinstance(value, np.ndarray):
            return self._array_leaf(value, path, "ndarray", where)
        if isinstance(value, np.generic):
            return self._array_leaf(np.asarray(value), path, "npscalar", where)
        if torchcompat.is_tensor(value):
            return self._torch_leaf(value, path, where)
        return None

    def _sharded(
        self, local: Any, gshape: list[int], offset: list[int], path: str, store: bool, dtensor: bool = False
    ) -> dict[str, Any]:
        inner = self._tensor(local, path, None if store else {"dup": True})
        if inner is None:
            raise InvalidStateError(
                f"{path or '/'}: Sharded(local=...) must be a numpy array or torch tensor, got {type(local).__name__}"
            )
        node = {"t": "sharded", "gshape": gshape, "offset": offset, "v": inner}
        return node | {"dtensor": True} if dtensor else node

    def node(self, value: Any, path: str, replicated: bool = False, keys: tuple[str | int, ...] = ()) -> dict[str, Any]:
        if isinstance(value, Mapping):
            items = []
            for k, v in value.items():
                key = check_state_key(k, path)
                seg = _escape(key) if isinstance(key, str) else str(key)
                items.append([key, self.node(v, f"{path}/{seg}" if path else seg, replicated, (*keys, key))])
            return {"t": "map", "items": items}
        if isinstance(value, Replicated):
            if replicated:
                return self.node(value.value, path, True, keys)
            return {"t": "replicated", "v": self.node(value.value, path, True, keys)}
        if isinstance(value, Sharded):
            try:
                offset, _ = value.box()
            except (ValueError, TypeError, AttributeError) as exc:
                raise InvalidStateError(f"{path or '/'}: {exc}") from None
            return self._sharded(value.local, [int(d) for d in value.global_shape], list(offset), path, True)
        local = None  # a DTensor's local piece
        if torchcompat.is_tensor(value):
            if torchcompat.is_sparse(value):
                raise InvalidStateError(
                    f"{path or '/'}: sparse tensors ({value.layout}) cannot be saved; save value.to_dense(), or "
                    "its indices and values (value.coalesce().indices() / .values()) as two tensors"
                )
            if torchcompat.is_dtensor(value):
                local = value.to_local()
            view = torchcompat.alias_key(value, local) if self.aliases else None
            if view is not None:  # tied weights: the same tensor at a second path is stored once
                if view in self._seen:
                    return {"t": "alias", "of": list(self._seen[view])}
                self._seen[view] = keys
        if local is not None:
            layout = torchcompat.dtensor_layout(value, path, local, self._boxes)
            if layout is None:  # replicated over the whole mesh
                return (
                    self.node(local, path, True)
                    if replicated
                    else {"t": "replicated", "v": self.node(local, path, True)}
                )
            local, gshape, dt_offset, store = layout
            return self._sharded(local, gshape, dt_offset, path, store, dtensor=True)
        where = None
        if replicated:
            writer = writer_rank(path or "__root__", self.world_size)
            where = None if writer == self.rank else {"rank": writer}
        tensor = self._tensor(value, path, where)
        if tensor is not None:
            return tensor
        if isinstance(value, bytes | bytearray | memoryview):
            kind = "bytearray" if isinstance(value, bytearray) else "bytes"
            return self._array_leaf(np.frombuffer(value, dtype=np.uint8), path, kind, where)
        if isinstance(value, list) and _json_value(value):
            return {"t": "json", "v": value}
        if isinstance(value, list | tuple):
            kind = "tuple" if isinstance(value, tuple) else "list"
            return {
                "t": kind,
                "items": [
                    self.node(v, f"{path}/{i}" if path else str(i), replicated, (*keys, i)) for i, v in enumerate(value)
                ],
            }
        if _is_json_scalar(value):
            return {"t": "json", "v": value}
        raise InvalidStateError(
            f"{path or '/'}: cannot save a {type(value).__module__}.{type(value).__qualname__} "
            "(supported: mappings, lists, tuples, numpy arrays/scalars, torch tensors, bytes, JSON values, "
            "Sharded, Replicated)"
        )


def flatten(
    state: Mapping[Any, Any], rank: int = 0, world_size: int = 1, *, aliases: bool = True
) -> tuple[dict[str, Any], list[TensorLeaf]]:
    """Split ``state`` into its JSON tree and this rank's tensor leaves (views, not copies).

    ``aliases``: a tensor met again at another path (tied weights) becomes an alias node instead of
    a second copy.

    Raises:
        InvalidStateError: the state is not a mapping, has unsafe keys or unsupported leaves.
    """
    if not isinstance(state, Mapping):
        raise InvalidStateError(f"state must be a mapping, got {type(state).__name__}")
    f = Flattener(rank, world_size, aliases=aliases)
    tree = f.node(state, "")
    return tree, f.leaves


def np_dtype_from_spec(spec: Any) -> np.dtype[Any]:
    """Rebuild a numpy dtype from its manifest spec, refusing object dtypes (pickle)."""
    try:
        if isinstance(spec, list):
            spec = [tuple(x) for x in spec]
        dtype = np.dtype(spec)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad dtype {spec!r}: {exc}") from None
    if dtype.hasobject:
        raise ValueError(f"object dtype {spec!r} refused")
    return dtype
