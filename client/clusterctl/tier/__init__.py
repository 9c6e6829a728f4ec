"""A memory tier for checkpoints: a process per node that holds a job's shards in memory.

A rank's save goes to its node's tier, which replicates every object to ``replicas`` peer tiers
(verified by xxh3 digest) before answering, then uploads it to the checkpoint URI in the
background. Restores read the node's tier, then the peers, then the URI. Every connection proves
the job's secret, so a tier serves one job's ranks only. Used through
``CheckpointManager(uri, tier="memory")``.
"""

from __future__ import annotations

from .client import TierClient
from .errors import TierAuthError, TierCorruptError, TierError, TierFullError, TierUnavailableError
from .process import TierEndpoints, TierProcess, endpoints_from_env, spawn_tier
from .server import TierServer, TierSettings
from .storage import ChainStorage, TierStorage

__all__ = [
    "ChainStorage",
    "TierAuthError",
    "TierClient",
    "TierCorruptError",
    "TierEndpoints",
    "TierError",
    "TierFullError",
    "TierProcess",
    "TierServer",
    "TierSettings",
    "TierStorage",
    "TierUnavailableError",
    "endpoints_from_env",
    "spawn_tier",
]
