"""A checkpoint manager's attachment to the memory tier: the storages it saves into and restores from.

Kept apart from the manager so that the tier package is imported only when a job asks for it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..storage import ObjectNotFoundError, Storage, StorageError
from . import layout
from .config import CheckpointConfig

if TYPE_CHECKING:
    from ..tier import ChainStorage, TierProcess, TierStorage

log = logging.getLogger(__name__)


@dataclass
class TierAttachment:
    save_storage: TierStorage
    read_storage: ChainStorage
    durable: Storage
    own: TierProcess | None  # a tier this manager started (outside a tiered job)

    @classmethod
    def open(cls, uri: str, durable: Storage, config: CheckpointConfig, world_size: int = 1) -> TierAttachment | None:
        """Attach to the job's tiers; None when the job's allocation started none (its ranks save
        straight to the URI). Raises ValueError for several ranks without them otherwise (each rank
        would start a private tier that sees no other rank's shards, and no commit would complete)."""
        from ..tier import ChainStorage, TierClient, TierStorage, endpoints_from_env, spawn_tier
        from ..tier.process import ENV_ADDR, ENV_JOB, ENV_PEERS, ENV_SECRET, tiers_did_not_start

        endpoints = endpoints_from_env()
        if endpoints is None and tiers_did_not_start():
            log.warning("checkpoint: the job's memory tiers did not start (see the job's stderr); saving to %s", uri)
            return None
        own = None
        if endpoints is None and world_size > 1:
            durable.close()
            raise ValueError(
                f'tier="memory" with {world_size} ranks needs the job\'s memory tiers: run the job under '
                "clusterd with --checkpoint-tier memory, or set "
                f"{ENV_ADDR}, {ENV_PEERS}, {ENV_JOB} and {ENV_SECRET} for every rank"
            )
        if endpoints is None:
            own = spawn_tier(replicas=0)
            endpoints = own.endpoints
            log.info("checkpoint: no memory tier in the environment; started one (pid %d, no peers)", own.proc.pid)

        def client(address: str) -> TierClient:
            return TierClient(address, secret=endpoints.secret, job=endpoints.job, timeout=config.read_timeout)

        save = TierStorage(client(endpoints.address), [client(p) for p in endpoints.peers], uri)
        read = TierStorage(client(endpoints.address), [client(p) for p in endpoints.peers], uri)
        return cls(save, ChainStorage(read, durable), durable, own)

    def close(self, last_committed: int | None, timeout: float) -> None:
        """Close connections; a tier this manager started is stopped once its newest step is durable."""
        try:
            if self.own is not None and last_committed is not None:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    try:
                        self.durable.stat(layout.commit_key(last_committed))
                        break
                    except (ObjectNotFoundError, StorageError):
                        time.sleep(0.1)
                else:
                    log.warning("checkpoint: step %d was not uploaded within %ss; it is lost", last_committed, timeout)
        finally:
            self.save_storage.close()
            self.read_storage.tiers.close()
            self.read_storage.close()
            self.durable.close()
            if self.own is not None:
                self.own.stop()
