"""Taking heartbeats: authenticate with the job's token, record the beat, say when to beat next.

Called by the JobService servicer for every beat of every rank, so the path is kept to memory
lookups: a record's digest and settings are read from the store once and cached while it lives.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from clusterctl.v1 import jobs_pb2
from clusterd.config import LivenessConfig
from clusterd.errors import InvalidArgument, Unauthenticated, Unavailable
from clusterd.liveness import credentials
from clusterd.liveness.table import Beat, LivenessTable, Run
from clusterd.store.base import JobStore

log = logging.getLogger(__name__)

_MAX_CACHED = 100_000


@dataclass(frozen=True)
class _Known:
    sha256: str
    job_id: str
    interval: float
    hang_timeout: float


FirstStep = Callable[[Run], Awaitable[None]]


class HeartbeatService:
    def __init__(
        self, store: JobStore, table: LivenessTable, config: LivenessConfig, first_step: FirstStep,
        *, leading: Callable[[], bool] = lambda: True,
    ) -> None:  # fmt: skip
        """``leading``: whether this replica supervises now; only the leader's detector listens."""
        self._store = store
        self._leading = leading
        self._table = table
        self._config = config
        self._first_step = first_step
        self._known: dict[int, _Known] = {}

    async def beat(self, req: jobs_pb2.HeartbeatRequest) -> tuple[float, bool]:
        """(seconds until the next beat, whether the run should stop: it is being restarted).

        Raises:
            Unauthenticated: no record with that id, or the token is not its token.
            InvalidArgument: a field out of range.
            Unavailable: this replica is a follower (the ranks try the next address).
        """
        if not self._leading():
            raise Unavailable("this clusterd replica is a follower; heartbeats go to the leader")
        if not req.token or req.record_id <= 0:
            raise Unauthenticated("heartbeat needs record_id and token (CLUSTERCTL_RECORD_ID, "
                                  "CLUSTERCTL_HEARTBEAT_TOKEN)")  # fmt: skip
        known = await self._lookup(req.record_id)
        if known is None or not credentials.matches(req.token, known.sha256):
            raise Unauthenticated("heartbeat token does not match the record")
        if len(req.node) > 255 or len(req.job_id) > 64:
            raise InvalidArgument("node" if len(req.node) > 255 else "job_id", "longer than Slurm allows")
        if req.world_size > 1_000_000 or req.rank >= max(req.world_size, 1):
            raise InvalidArgument("rank", f"{req.rank} is not below world_size {req.world_size}")
        beat = Beat(req.record_id, req.job_id or known.job_id, req.restart_count, req.rank,
                    max(req.world_size, 1), req.node, req.pid, req.step, req.committed_step, req.restored,
                    req.exiting, req.exit_code)  # fmt: skip
        run, first = self._table.record(beat, interval=known.interval, hang_timeout=known.hang_timeout)
        if req.exiting:
            log.info("job %s run %d: rank %d/%d on %s exits with status %d", beat.job_id, beat.restart_count,
                     beat.rank, beat.world_size, beat.node, beat.exit_code)  # fmt: skip
        if first and run.restart_count > 0:
            await self._first_step(run)
        return known.interval, run.decided and run.restart_count == req.restart_count

    async def _lookup(self, record_id: int) -> _Known | None:
        known = self._known.get(record_id)
        if known is not None:
            return known
        rec = await self._store.get_by_record(record_id)
        if rec is None or rec.terminal or not rec.heartbeat_token_sha256:
            return None
        known = _Known(rec.heartbeat_token_sha256, rec.job_id, credentials.interval_of(rec.spec, self._config),
                       credentials.hang_timeout_of(rec.spec, self._config))  # fmt: skip
        if len(self._known) >= _MAX_CACHED:
            self._known.pop(next(iter(self._known)))
        self._known[record_id] = known
        return known
