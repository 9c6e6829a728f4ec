"""Parallel layouts of a leaf: :class:`Sharded` pieces of one global array, :class:`Replicated` values.

Saving at world size N and restoring at M needs to know, per leaf, which part of which global
array each rank holds. These two wrappers say it (torch DTensors say it themselves, see
``torchcompat.dtensor_layout``); a leaf in neither is *rank-local* and only restores on the same
rank at the same world size. The box arithmetic used to map pieces onto the slices wanted now is
here too, as pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import xxhash

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (offset, shape)


@dataclass(frozen=True)
class Sharded:
    """This rank holds ``global[offset[0]:offset[0]+local.shape[0], ...]`` of a global array.

    ``offset`` may be an int (an offset along dim 0). ``local`` is a numpy array or torch tensor.
    """

    local: Any
    global_shape: Sequence[int]
    offset: Sequence[int] | int = 0

    def box(self) -> Box:
        """(offset, local shape) checked against the global shape.

        Raises:
            ValueError: ranks disagree with the global shape (naming the dimension).
        """
        gshape = tuple(int(d) for d in self.global_shape)
        lshape = tuple(int(d) for d in self.local.shape)
        off = (
            (int(self.offset),) + (0,) * (len(gshape) - 1)
            if isinstance(self.offset, int)
            else tuple(int(o) for o in self.offset)
        )
        if len(gshape) != len(lshape) or len(off) != len(gshape):
            raise ValueError(
                f"Sharded: local shape {list(lshape)}, offset {list(off)} and global shape "
                f"{list(gshape)} must have the same number of dimensions"
            )
        for d, (o, n, g) in enumerate(zip(off, lshape, gshape, strict=True)):
            if o < 0 or n < 0 or o + n > g:
                raise ValueError(f"Sharded: dim {d}: offset {o} + local size {n} exceeds global size {g}")
        return off, lshape


@dataclass(frozen=True)
class Replicated:
    """The same value on every rank (DDP weights, step counters): stored once, by one rank per leaf."""

    value: Any


def writer_rank(name: str, world_size: int) -> int:
    """The rank that stores replicated leaf ``name``: a stable hash, the same on every rank, no collective."""
    return xxhash.xxh3_64_intdigest(name.encode("utf-8")) % world_size


def even_box(global_shape: Sequence[int], rank: int, world_size: int) -> Box:
    """``torch.chunk`` along dim 0: what a rank gets when the caller gives no layout for a sharded leaf."""
    gshape = tuple(int(d) for d in global_shape)
    if not gshape:
        return (), ()
    size = -(-gshape[0] // world_size) if gshape[0] else 0
    lo = min(gshape[0], rank * size)
    hi = min(gshape[0], lo + size)
    return (lo,) + (0,) * (len(gshape) - 1), (hi - lo, *gshape[1:])


def intersect(a: Box, b: Box) -> Box | None:
    """The overlap of two boxes, or None when it is empty."""
    lo = tuple(max(x, y) for x, y in zip(a[0], b[0], strict=True))
    hi = tuple(min(x + n, y + m) for x, n, y, m in zip(a[0], a[1], b[0], b[1], strict=True))
    if any(h <= ell for ell, h in zip(lo, hi, strict=True)):
        return None
    return lo, tuple(h - ell for ell, h in zip(lo, hi, strict=True))


def volume(box: Box) -> int:
    return math.prod(box[1])


def flat_span(shape: Sequence[int], lo: Sequence[int], size: Sequence[int]) -> tuple[int, int]:
    """Element range ``[first, last + 1)`` of a C-ordered array of ``shape`` that covers a sub-box."""
    if not shape:
        return 0, 1
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    first = sum(o * s for o, s in zip(lo, strides, strict=True))
    last = sum((o + n - 1) * s for o, n, s in zip(lo, size, strides, strict=True))
    return first, last + 1
