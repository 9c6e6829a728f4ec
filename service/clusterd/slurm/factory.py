"""Choose the Slurm backend named in the configuration."""

from __future__ import annotations

from clusterd.config import ConfigError, SlurmConfig
from clusterd.slurm.base import SlurmBackend


def make_backend(config: SlurmConfig) -> SlurmBackend:
    if config.backend == "commands":
        from clusterd.slurm.commands import CommandsBackend

        return CommandsBackend(config)
    raise ConfigError(f"slurm.backend: unknown backend {config.backend!r} (available: commands)")
