"""A job's newest committed checkpoint step, read with one LIST of its commit markers.

The service only lists marker names (it never reads checkpoint data), in a worker thread because
boto3 and the filesystem block. Credentials come from the service's own AWS_* environment.
"""

from __future__ import annotations

import asyncio
import logging
import time

from clusterctl.checkpoint.gc import latest_committed
from clusterctl.storage import StorageError, open_storage

log = logging.getLogger(__name__)


def _latest_step(uri: str) -> int:
    storage = open_storage(uri)
    try:
        step = latest_committed(storage)
    finally:
        storage.close()
    return -1 if step is None else step


class ProgressTracker:
    """Caches each URI's newest step for ``min_interval`` seconds so polling stays cheap."""

    def __init__(self, min_interval: float = 10.0) -> None:
        self._min_interval = min_interval
        self._cache: dict[str, tuple[float, int]] = {}

    async def latest_step(self, uri: str, *, fresh: bool = False) -> int | None:
        """Newest committed step (-1 when none), or None when the store cannot be read now."""
        if not uri:
            return None
        cached = self._cache.get(uri)
        if cached and not fresh and time.monotonic() - cached[0] < self._min_interval:
            return cached[1]
        try:
            step = await asyncio.to_thread(_latest_step, uri)
        except (StorageError, ValueError, OSError) as exc:
            log.warning("cannot read checkpoint progress of %s: %s", uri, exc)
            return cached[1] if cached else None
        self._cache[uri] = (time.monotonic(), step)
        return step
