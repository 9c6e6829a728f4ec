"""Flattening a nested state into tensor leaves plus a JSON tree, and back. No pickle anywhere.

Supported: mappings with str keys, lists, tuples, numpy arrays and scalars, torch tensors (when
torch is imported by the caller), bytes/bytearray (stored as uint8 tensors), and JSON values
(None, bool, int, float, str). Anything else raises :class:`InvalidStateError` naming its path:
saving it would need pickle.

Tree nodes (the ``tree`` field of a shard manifest)::

    {"t": "dict", "items": {key: node, ...}}       {"t": "list"|"tuple", "items": [node, ...]}
    {"t": "ndarray"|"npscalar", "name": tensor, "dtype": numpy dtype (str or descr list), "shape": [...]}
    {"t": "torch", "name": tensor, "dtype": "bfloat16", "shape": [...], "device": "cuda:0"}
    {"t": "bytes"|"bytearray", "name": tensor}     {"t": "json", "v": value}

Tensor names are the path of the leaf, keys escaped as in JSON Pointer (``~`` -> ``~0``,
``/`` -> ``~1``) and joined with ``/``, e.g. ``model/layers/0/weight``.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import torchcompat
from .errors import InvalidStateError

# numpy dtypes that safetensors names natively (little-endian only)
NUMPY_TO_ST: dict[str, str] = {
    "|b1": "BOOL", "|i1": "I8", "|u1": "U8", "<i2": "I16", "<u2": "U16", "<i4": "I32", "<u4": "U32",
    "<i8": "I64", "<u8": "U64", "<f2": "F16", "<f4": "F32", "<f8": "F64", "<c8": "C64",
}
ST_ITEMSIZE: dict[str, int] = {
    "BOOL": 1, "I8": 1, "U8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8,
    "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "C64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
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


def check_state_key(key: object, path: str) -> str:
    """Validate a mapping key of the state (they become tensor names that tools may map to files)."""
    if not isinstance(key, str):
        raise InvalidStateError(f"state keys must be str, got {type(key).__name__} at {path or '/'}")
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
    """Walks a state once, collecting tensor leaves and building the JSON tree."""

    def __init__(self) -> None:
        self.leaves: list[TensorLeaf] = []
        self._names: set[str] = set()

    def _name(self, path: str) -> str:
        name = path or "__root__"
        if name == "__metadata__" or name in self._names:
            raise InvalidStateError(f"tensor name {name!r} is reserved or duplicated")
        self._names.add(name)
        return name

    def _array_leaf(self, arr: np.ndarray, path: str, kind: str) -> dict[str, Any]:
        if arr.dtype.hasobject:
            raise InvalidStateError(f"{path or '/'}: object arrays cannot be saved without pickle")
        name = self._name(path)
        st = NUMPY_TO_ST.get(arr.dtype.str)
        if st is not None:
            st_shape = [int(d) for d in arr.shape]
        else:  # raw bytes with the exact numpy dtype recorded in the tree
            st, st_shape = "U8", [int(arr.nbytes)]
        self.leaves.append(TensorLeaf(name, arr, arr, st, st_shape, int(arr.nbytes),
                                      min(8, max(1, arr.dtype.alignment))))
        return {"t": kind, "name": name, "dtype": _dtype_spec(arr.dtype), "shape": [int(d) for d in arr.shape]}

    def _torch_leaf(self, t: Any, path: str) -> dict[str, Any]:
        dname = torchcompat.dtype_name(t)
        if dname not in torchcompat.TORCH_DTYPES:
            raise InvalidStateError(f"{path or '/'}: torch dtype {dname} is not supported")
        name = self._name(path)
        st, np_dtype = torchcompat.TORCH_DTYPES[dname]
        shape = [int(d) for d in t.shape]
        itemsize = np.dtype(np_dtype).itemsize
        nbytes = math.prod(shape) * itemsize
        if st is None:
            st, st_shape = "U8", [nbytes]
        else:
            st_shape = shape
        device = str(t.device)
        array = None if t.device.type != "cpu" else torchcompat.cpu_bytes_view(t)
        self.leaves.append(TensorLeaf(name, array, t, st, st_shape, nbytes, min(8, itemsize)))
        return {"t": "torch", "name": name, "dtype": dname, "shape": shape, "device": device}

    def node(self, value: Any, path: str) -> dict[str, Any]:
        if isinstance(value, Mapping):
            items = {}
            for k, v in value.items():
                check_state_key(k, path)
                items[k] = self.node(v, f"{path}/{_escape(k)}" if path else _escape(k))
            return {"t": "dict", "items": items}
        if isinstance(value, np.ndarray):
            return self._array_leaf(value, path, "ndarray")
        if isinstance(value, np.generic):
            return self._array_leaf(np.asarray(value), path, "npscalar")
        if torchcompat.is_tensor(value):
            return self._torch_leaf(value, path)
        if isinstance(value, bytes | bytearray | memoryview):
            kind = "bytearray" if isinstance(value, bytearray) else "bytes"
            arr = np.frombuffer(value, dtype=np.uint8)
            leaf = self._array_leaf(arr, path, kind)
            return {"t": kind, "name": leaf["name"]}
        if isinstance(value, list) and _json_value(value):
            return {"t": "json", "v": value}
        if isinstance(value, list | tuple):
            kind = "tuple" if isinstance(value, tuple) else "list"
            return {"t": kind, "items": [self.node(v, f"{path}/{i}" if path else str(i))
                                         for i, v in enumerate(value)]}
        if _is_json_scalar(value):
            return {"t": "json", "v": value}
        raise InvalidStateError(
            f"{path or '/'}: cannot save a {type(value).__module__}.{type(value).__qualname__} "
            "(supported: mappings, lists, tuples, numpy arrays/scalars, torch tensors, bytes, JSON values)"
        )


def flatten(state: Mapping[str, Any]) -> tuple[dict[str, Any], list[TensorLeaf]]:
    """Split ``state`` into its JSON tree and its tensor leaves (views, not copies).

    Raises:
        InvalidStateError: the state is not a mapping, has unsafe keys or unsupported leaves.
    """
    if not isinstance(state, Mapping):
        raise InvalidStateError(f"state must be a mapping of str to values, got {type(state).__name__}")
    f = Flattener()
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


def unflatten(tree: Any, tensor: Callable[[str], np.ndarray], *, torch: Any | None) -> Any:
    """Rebuild the state from its tree; ``tensor(name)`` returns the bytes of one tensor as uint8.

    Raises:
        ValueError: the tree is malformed or a tensor's size does not match its dtype and shape.
    """
    if not isinstance(tree, dict) or "t" not in tree:
        raise ValueError("malformed tree node")
    kind = tree["t"]
    if kind == "dict":
        items = tree.get("items")
        if not isinstance(items, dict):
            raise ValueError("malformed dict node")
        return {k: unflatten(v, tensor, torch=torch) for k, v in items.items()}
    if kind in ("list", "tuple"):
        items = tree.get("items")
        if not isinstance(items, list):
            raise ValueError("malformed list node")
        out = [unflatten(v, tensor, torch=torch) for v in items]
        return tuple(out) if kind == "tuple" else out
    if kind == "json":
        return tree.get("v")
    name = tree.get("name")
    if not isinstance(name, str):
        raise ValueError("tensor node without a name")
    raw = tensor(name)
    if kind in ("bytes", "bytearray"):
        return bytes(raw) if kind == "bytes" else bytearray(raw)
    shape = tree.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"tensor {name!r}: bad shape {shape!r}")
    if kind in ("ndarray", "npscalar"):
        dtype = np_dtype_from_spec(tree.get("dtype"))
        if math.prod(shape) * dtype.itemsize != raw.nbytes:
            raise ValueError(f"tensor {name!r}: {raw.nbytes} bytes do not match dtype {dtype} and shape {shape}")
        arr = raw.view(dtype).reshape(shape)
        return arr[()] if kind == "npscalar" else arr
    if kind == "torch":
        dname = tree.get("dtype")
        if not isinstance(dname, str) or dname not in torchcompat.TORCH_DTYPES:
            raise ValueError(f"tensor {name!r}: unknown torch dtype {dname!r}")
        np_dtype = np.dtype(torchcompat.TORCH_DTYPES[dname][1])
        if math.prod(shape) * np_dtype.itemsize != raw.nbytes:
            raise ValueError(f"tensor {name!r}: {raw.nbytes} bytes do not match {dname} and shape {shape}")
        if torch is None:  # no torch: same bytes as the closest numpy dtype (bfloat16 -> uint16)
            return raw.view(np_dtype).reshape(shape)
        return torchcompat.tensor_from_bytes(torch, raw, dname, shape)
    raise ValueError(f"unknown tree node type {kind!r}")


def tree_has_torch(tree: Any) -> bool:
    if not isinstance(tree, dict):
        return False
    if tree.get("t") == "torch":
        return True
    items = tree.get("items")
    if isinstance(items, dict):
        return any(tree_has_torch(v) for v in items.values())
    if isinstance(items, list):
        return any(tree_has_torch(v) for v in items)
    return False
