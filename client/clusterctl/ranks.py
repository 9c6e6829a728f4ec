"""This process's rank and world size, as torch.distributed, torchrun or Slurm tell them.

Its own module so that everything that needs the rank (the checkpoint manager, the heartbeat
sender, clusterctl.slurm_env, which re-exports it) can import it without importing each other.

The order matters under ``srun torchrun``: Slurm starts one task per node and torchrun starts
several processes inside it, which all inherit that task's ``SLURM_PROCID``. Only the process
group and torchrun's ``RANK``/``WORLD_SIZE`` tell those processes apart.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from clusterctl.digits import parse_digits


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    return None if value is None else parse_digits(value.strip())


def _env_pair(env: Mapping[str, str], rank_var: str, world_var: str) -> tuple[int, int] | None:
    rank, world = _env_int(env, rank_var), _env_int(env, world_var)
    if rank is not None and world is not None and 0 <= rank < world:
        return rank, world
    return None


def torch_rank_and_world_size() -> tuple[int, int] | None:
    """(rank, world size) of an initialized torch.distributed default group; never imports torch."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return None


def rank_and_world_size(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(rank, world_size): an initialized torch.distributed group, then torchrun's RANK/WORLD_SIZE,
    then SLURM_PROCID/SLURM_NTASKS, then (0, 1)."""
    env = os.environ if env is None else env
    return (
        torch_rank_and_world_size()
        or _env_pair(env, "RANK", "WORLD_SIZE")
        or _env_pair(env, "SLURM_PROCID", "SLURM_NTASKS")
        or (0, 1)
    )
