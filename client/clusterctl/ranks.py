"""This process's rank and world size, as Slurm (or torch.distributed) tells them.

Its own module so that everything that needs the rank (the checkpoint manager, the heartbeat
sender, clusterctl.slurm_env, which re-exports it) can import it without importing each other.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from clusterctl.digits import parse_digits


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    return None if value is None else parse_digits(value.strip())


def rank_and_world_size(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(rank, world_size): SLURM_PROCID/SLURM_NTASKS, then torch.distributed, then (0, 1)."""
    env = os.environ if env is None else env
    rank, world = _env_int(env, "SLURM_PROCID"), _env_int(env, "SLURM_NTASKS")
    if rank is not None and world is not None and 0 <= rank < world:
        return rank, world
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = getattr(torch, "distributed", None)
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1
