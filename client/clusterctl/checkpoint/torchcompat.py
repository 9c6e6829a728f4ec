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
    "float32": ("F32", "<f4"), "float64": ("F64", "<f8"), "float16": ("F16", "<f2"),
    "bfloat16": ("BF16", "<u2"), "int8": ("I8", "|i1"), "int16": ("I16", "<i2"), "int32": ("I32", "<i4"),
    "int64": ("I64", "<i8"), "uint8": ("U8", "|u1"), "uint16": ("U16", "<u2"), "uint32": ("U32", "<u4"),
    "uint64": ("U64", "<u8"), "bool": ("BOOL", "|b1"), "complex64": ("C64", "<c8"),
    "complex128": (None, "<c16"), "float8_e4m3fn": ("F8_E4M3", "|u1"), "float8_e5m2": ("F8_E5M2", "|u1"),
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
    if name in ("bfloat16",):
        t = t.view(torch.int16)
    elif name.startswith("float8"):
        t = t.view(torch.uint8)
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
