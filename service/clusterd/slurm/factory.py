"""Choose the Slurm backend named in the configuration (``slurm.backend``), once, at startup.

``auto`` picks only a backend the real-Slurm tests cover: slurmrestd when ``slurm.restd_url`` is
set, else Slurm's own commands, which work everywhere; the log says which and why. pyslurm is
used only when named. Backends are imported lazily so a site without h11/pyslurm still starts
with ``commands``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from clusterd.config import ConfigError, SlurmConfig
from clusterd.errors import SlurmError
from clusterd.slurm.base import SlurmBackend

log = logging.getLogger(__name__)

BACKENDS = ("commands", "slurmrestd", "pyslurm", "auto")


def _commands(config: SlurmConfig) -> SlurmBackend:
    from clusterd.slurm.commands import CommandsBackend

    return CommandsBackend(config)


def _slurmrestd(config: SlurmConfig) -> SlurmBackend:
    from clusterd.slurm.restd import RestdBackend

    try:
        return RestdBackend(config)
    except SlurmError as exc:
        how = "" if config.backend == "slurmrestd" else " (slurmrestd: slurm.restd_url is set)"
        raise ConfigError(f"slurm.backend = {config.backend!r}{how}: {exc}") from exc


def _pyslurm_reason(config: SlurmConfig) -> str | None:
    from clusterd.slurm.pyslurm_backend import unavailable_reason

    return unavailable_reason(config=config)


def _pyslurm(config: SlurmConfig) -> SlurmBackend:
    reason = _pyslurm_reason(config)
    if reason is not None:
        raise ConfigError(f"slurm.backend = 'pyslurm' cannot be used: {reason}")
    from clusterd.slurm.pyslurm_backend import PyslurmBackend

    return PyslurmBackend(config)


def _auto(config: SlurmConfig) -> SlurmBackend:
    chosen = config.chosen_backend  # slurmrestd or commands: never pyslurm, which no real-Slurm test covers
    log.info("slurm backend: %s (auto: slurm.restd_url is %s)", chosen, "set" if chosen == "slurmrestd" else "not set")
    return _MAKERS[chosen](config)


_MAKERS: dict[str, Callable[[SlurmConfig], SlurmBackend]] = {
    "commands": _commands,
    "slurmrestd": _slurmrestd,
    "pyslurm": _pyslurm,
    "auto": _auto,
}


def make_backend(config: SlurmConfig) -> SlurmBackend:
    """The backend ``config.backend`` names; ConfigError (naming ``slurm.backend``) when it cannot be used."""
    maker = _MAKERS.get(config.backend)
    if maker is None:
        raise ConfigError(f"slurm.backend: unknown backend {config.backend!r} (available: {', '.join(BACKENDS)})")
    backend = maker(config)
    if config.backend != "auto":
        log.info("slurm backend: %s (configured)", config.backend)
    return backend
