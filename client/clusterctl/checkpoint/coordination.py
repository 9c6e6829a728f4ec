"""How ranks agree without a shared process group, and with one when torch.distributed is up.

Without torch.distributed, ranks coordinate only through storage (rank 0 polls for manifests,
the others poll for the commit marker). When torch.distributed is initialised the manager makes
its own gloo group at construction (collectively, on every rank), and the background save thread
of every rank takes part in one ``all_reduce(MIN)`` per save, so a failure on any rank is known to
all at once instead of after ``commit_timeout``. The private group keeps these collectives off
the training's default group, whose ordering belongs to the caller's thread.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from typing import Any, Protocol

log = logging.getLogger(__name__)


def _destroy(torch: Any, group: Any) -> None:
    """Shut a private group down now rather than at interpreter exit, where gloo's threads may be
    torn down in any order (and abort the process)."""
    dist = torch.distributed
    if group is not None and dist.is_initialized():
        with contextlib.suppress(Exception):  # already gone with the default group
            dist.destroy_process_group(group)


class Coordinator(Protocol):
    def agree(self, ok: bool, *, timeout: float) -> bool:
        """True iff every rank passed ``ok=True``. Every rank must call it the same number of times."""
        ...


class TorchCoordinator:
    """all_reduce(MIN) of a success flag over a private gloo group."""

    def __init__(self, torch: Any, group: Any) -> None:
        self._torch = torch
        self._group = group

    @classmethod
    def create(cls, torch: Any) -> TorchCoordinator:
        return cls(torch, torch.distributed.new_group(backend="gloo"))

    def agree(self, ok: bool, *, timeout: float) -> bool:
        dist = self._torch.distributed
        flag = self._torch.tensor([1 if ok else 0], dtype=self._torch.int32)
        try:
            work = dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self._group, async_op=True)
            work.wait(timeout=datetime.timedelta(seconds=timeout))
        except Exception as exc:  # a peer died or timed out: treat as failure
            log.warning("checkpoint agreement failed: %s", exc)
            return False
        return bool(flag.item() == 1)

    def broadcast_token(self) -> str:
        """A random hex token chosen by rank 0 and known to every rank (collective)."""
        import os

        data = self._torch.tensor(list(os.urandom(6)), dtype=self._torch.int32)
        self._torch.distributed.broadcast(data, src=0, group=self._group)
        return "".join(f"{int(b):02x}" for b in data.tolist())

    def close(self) -> None:
        group, self._group = self._group, None
        _destroy(self._torch, group)


class DueAgreement:
    """Whether a save is due on any rank, and the fewest ``due()`` calls any rank expects before its
    clock says so: one ``all_reduce(MAX)`` over a gloo group of its own.

    ``due()`` runs on the training thread while the background save thread agrees on commits over
    the coordinator's group; two threads' collectives on one group pair up in a different order on
    each rank (the ranks then disagree, or hang), so the due poll never shares that group.
    """

    def __init__(self, torch: Any, group: Any, timeout: float) -> None:
        self._torch = torch
        self._group = group
        self._timeout = timeout

    @classmethod
    def create(cls, torch: Any, *, timeout: float) -> DueAgreement:
        """Collective: every rank calls it, at the same point of the program."""
        group = torch.distributed.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout))
        return cls(torch, group, timeout)

    def poll(self, due: bool, calls_left: int) -> tuple[bool, int] | None:
        """(due on some rank, the fewest calls left over the ranks); None when the peers did not all
        answer within the timeout."""
        dist = self._torch.distributed
        both = self._torch.tensor([1 if due else 0, -calls_left], dtype=self._torch.int64)
        try:
            work = dist.all_reduce(both, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
            work.wait(timeout=datetime.timedelta(seconds=self._timeout))
        except Exception as exc:  # a peer died or is far behind
            log.warning("checkpoint due() poll failed: %s", exc)
            return None
        return bool(both[0].item()), -int(both[1].item())

    def close(self) -> None:
        group, self._group = self._group, None
        _destroy(self._torch, group)


class StopAgreement:
    """Whether any rank was asked to stop, answered alike on every rank at the same poll.

    A stop signal reaches the ranks of a job at slightly different moments, and each rank notices
    it between its own training steps: left alone, rank 0 saves step 80 while rank 1 saves step
    79, and neither save commits. One ``all_reduce(MAX)`` of the local flag per poll, over a
    private gloo group (CPU, off the training's default group), makes every rank see the stop at
    the same step.
    """

    def __init__(self, torch: Any, group: Any) -> None:
        self._torch = torch
        self._group = group

    @classmethod
    def create(cls) -> StopAgreement | None:
        """One for the initialized process group (collective: every rank calls it), else None."""
        import sys

        torch = sys.modules.get("torch")
        dist = getattr(torch, "distributed", None) if torch is not None else None
        if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
            return None
        return cls(torch, dist.new_group(backend="gloo"))

    def any(self, flag: bool) -> bool:
        """True on every rank iff some rank passed True (collective)."""
        value = self._torch.tensor([1 if flag else 0], dtype=self._torch.int32)
        self._torch.distributed.all_reduce(value, op=self._torch.distributed.ReduceOp.MAX, group=self._group)
        return bool(value.item())

    def bounds(self, value: int) -> tuple[int, int]:
        """(smallest, largest) ``value`` over the ranks (collective)."""
        both = self._torch.tensor([value, -value], dtype=self._torch.int64)
        self._torch.distributed.all_reduce(both, op=self._torch.distributed.ReduceOp.MAX, group=self._group)
        return -int(both[1].item()), int(both[0].item())

    def close(self) -> None:
        group, self._group = self._group, None
        _destroy(self._torch, group)
