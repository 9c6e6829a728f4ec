"""Optional torch support. torch is never imported at module import time.

A state can only contain torch tensors if the caller imported torch, so saving looks torch up in
``sys.modules``; restoring imports it (when installed) only if the checkpoint holds torch tensors.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

# torch dtype name -> (safetensors dtype or None for raw bytes, numpy dtype of the same bytes)
TORCH_DTYPES: dict[str, tuple[str | None, str]] = {
    "float32": ("F32", "<f4"),
    "float64": ("F64", "<f8"),
    "float16": ("F16", "<f2"),
    "bfloat16": ("BF16", "<u2"),
    "int8": ("I8", "|i1"),
    "int16": ("I16", "<i2"),
    "int32": ("I32", "<i4"),
    "int64": ("I64", "<i8"),
    "uint8": ("U8", "|u1"),
    "uint16": ("U16", "<u2"),
    "uint32": ("U32", "<u4"),
    "uint64": ("U64", "<u8"),
    "bool": ("BOOL", "|b1"),
    "complex64": ("C64", "<c8"),
    "complex128": (None, "<c16"),
    "float8_e4m3fn": ("F8_E4M3", "|u1"),
    "float8_e5m2": ("F8_E5M2", "|u1"),
    # no safetensors name: stored as raw bytes, the torch dtype is recorded in the manifest tree
    "complex32": (None, "<u4"),
    "float8_e4m3fnuz": (None, "|u1"),
    "float8_e5m2fnuz": (None, "|u1"),
    "float8_e8m0fnu": (None, "|u1"),
    "float4_e2m1fn_x2": (None, "|u1"),
    "bits8": (None, "|u1"),
    "bits16": (None, "<u2"),
    "bits1x8": (None, "|u1"),
    "bits2x4": (None, "|u1"),
    "bits4x2": (None, "|u1"),
}
# dtypes numpy has natively (``Tensor.numpy()`` works); every other one is viewed as a same-size int
_NUMPY_NATIVE = {
    "float32",
    "float64",
    "float16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex64",
    "complex128",
}


def loaded_torch() -> Any | None:
    """The torch module if the process already imported it, else None."""
    return sys.modules.get("torch")


def import_torch() -> Any | None:
    """torch if installed (importing it), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def is_tensor(obj: object) -> bool:
    torch = loaded_torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def is_sparse(tensor: Any) -> bool:
    torch = loaded_torch()
    return torch is not None and tensor.layout != torch.strided


def alias_key(tensor: Any, local: Any = None) -> tuple[Any, ...] | None:
    """What makes two tensors the same one: the same bytes viewed the same way (None when empty).

    ``module.state_dict()`` returns a fresh ``detach()``-ed tensor per key, so tied weights are two
    objects over one storage, not one object. For a DTensor: its local view (``local``, when the
    caller has it already) plus its global layout.
    """
    if local is None:
        local = tensor.to_local() if is_dtensor(tensor) else tensor
    if local.numel() == 0 or local.device.type == "meta":
        return None
    ptr = local.untyped_storage().data_ptr()
    if ptr == 0:
        return None
    view: tuple[Any, ...] = (
        str(local.device),
        ptr,
        local.storage_offset(),
        tuple(local.shape),
        tuple(local.stride()),
        str(local.dtype),
    )
    if local is not tensor:
        view += (tuple(tensor.shape), str(tensor.placements))
    return view


def dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def cpu_bytes_view(tensor: Any) -> np.ndarray:
    """A numpy array sharing the bytes of a CPU tensor (no copy), typed as its same-size numpy dtype."""
    torch = loaded_torch()
    assert torch is not None
    t = tensor.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    name = dtype_name(t)
    np_dtype = np.dtype(TORCH_DTYPES[name][1])
    if name not in _NUMPY_NATIVE:  # same bytes, same strides: works for non-contiguous and 0-d views
        t = t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[np_dtype.itemsize])
    return np.asarray(t.numpy()).view(np_dtype)


def copy_cuda_into(tensor: Any, dest: np.ndarray) -> None:
    """Start an async device-to-host copy of ``tensor`` into ``dest`` (pinned staging bytes)."""
    torch = loaded_torch()
    assert torch is not None
    target = torch.from_numpy(dest.reshape(-1).view(np.uint8))
    src = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    target.copy_(src, non_blocking=True)


def synchronize() -> None:
    torch = loaded_torch()
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()


def cuda_available() -> bool:
    torch = loaded_torch()
    return bool(torch is not None and torch.cuda.is_available())


def pinned_empty(nbytes: int) -> np.ndarray:
    torch = loaded_torch()
    assert torch is not None
    return np.asarray(torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy())


def tensor_from_bytes(torch: Any, data: np.ndarray, dtype_name_: str, shape: list[int]) -> Any:
    """A CPU tensor over restored bytes (no copy), with the saved torch dtype and shape."""
    flat = torch.from_numpy(data.reshape(-1).view(np.uint8))
    return flat.view(getattr(torch, dtype_name_)).reshape(shape)


def is_dtensor(obj: object) -> bool:
    """True for a torch DTensor (FSDP2 / tensor-parallel parameter or state); never imports torch."""
    torch = loaded_torch()
    if torch is None or not isinstance(obj, torch.Tensor):
        return False
    dtensor = sys.modules.get("torch.distributed.tensor")
    return dtensor is not None and isinstance(obj, dtensor.DTensor)


Boxes = dict[tuple[Any, ...], tuple[tuple[int, ...], tuple[int, ...]]]


def dtensor_box(t: Any, boxes: Boxes | None = None) -> tuple[list[int], list[int], list[int]]:
    """(global shape, local shape, global offset) of this rank's piece of a DTensor (or a template).

    ``boxes`` memoizes torch's computation by (global shape, mesh, placements): a model's layers
    repeat a few shapes, and torch's box arithmetic costs tens of microseconds per tensor.

    Raises:
        ValueError: a placement that is not Shard(dim) or Replicate (Partial, strided sharding).
    """
    gshape = tuple(int(d) for d in t.shape)
    key = (gshape, t.device_mesh, tuple(t.placements))
    box = boxes.get(key) if boxes is not None else None
    if box is None:
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        for p in t.placements:
            if type(p) not in (Shard, Replicate):
                raise ValueError(f"DTensor placement {p} is not supported (only Shard(dim) and Replicate)")
        lshape, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
        box = tuple(int(d) for d in lshape), tuple(int(o) for o in offset)
        if boxes is not None:
            boxes[key] = box
    return list(gshape), list(box[0]), list(box[1])


def dtensor_layout(
    t: Any, path: str, local: Any = None, boxes: Boxes | None = None
) -> tuple[Any, list[int], list[int], bool] | None:
    """``(local, global shape, offset, store)`` of a DTensor, or None when it is replicated everywhere.

    ``store`` is False on the replicas that do not write this piece: among the ranks holding the
    same piece, the one at mesh coordinate ``writer_rank(path, size)`` (xxh3 of the path, mod the
    dimension's size) of each Replicate dimension does. ``local`` is ``t.to_local()`` when the
    caller has it already; ``boxes`` as in :func:`dtensor_box`.
    """
    from torch.distributed.tensor import Replicate

    from .errors import InvalidStateError
    from .parallel import writer_rank

    if all(isinstance(p, Replicate) for p in t.placements):
        return None
    try:
        gshape, _, offset = dtensor_box(t, boxes)
    except ValueError as exc:
        raise InvalidStateError(f"{path or '/'}: {exc}") from None
    mesh = t.device_mesh
    coords = mesh.get_coordinate() or []
    store = all(
        coords[d] == writer_rank(path, mesh.size(d)) for d, p in enumerate(t.placements) if isinstance(p, Replicate)
    )
    return (t.to_local() if local is None else local), gshape, offset, store


def make_dtensor(local: Any, template: Any) -> Any:
    """A DTensor with ``template``'s mesh and placements over this rank's restored ``local`` piece."""
    from torch.distributed.tensor import DTensor

    local = local.to(template.device) if local.device != template.device else local
    return DTensor.from_local(
        local,
        template.device_mesh,
        template.placements,
        run_check=False,
        shape=template.shape,
        stride=template.stride(),
    )
