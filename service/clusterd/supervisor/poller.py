"""The one queue poll (STYLE 4).

Every interval the poller asks Slurm for the whole queue and the node list exactly once, caches
them, reconciles every live record in the store, and publishes the differences to the event bus.
RPCs read this cache and the store; nothing else in the service asks Slurm about the queue, so
slurmctld's load does not grow with the number of watchers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from clusterd.errors import SlurmError
from clusterd.jobs.validate import ClusterFacts
from clusterd.observability.metrics import JOBS_BY_STATE, POLL_LATENCY
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.types import JobState, SlurmJob, SlurmNode, SlurmSwitch
from clusterd.store.records import JobRecord, Phase
from clusterd.store.sqlite import JobStore
from clusterd.supervisor.events import EventBus, EventType, JobEvent

log = logging.getLogger(__name__)

# A live job missing from this many consecutive polls has left Slurm's memory (MinJobAge).
_MISSING_POLLS = 3
_TOPOLOGY_EVERY = 30  # polls between topology refreshes: the switch tree rarely changes
_ADOPT_GRACE_SECONDS = 5.0
_MIN_POLL_GAP = 0.5  # seconds between poll starts, however often the poller is kicked

# Called after every observation of a live job, with the nodes it had before; may requeue it.
TransitionHook = Callable[[JobRecord, tuple[str, ...], SlurmJob], Awaitable[None]]


@dataclass(frozen=True)
class ClusterSnapshot:
    """The latest poll: immutable, swapped whole so readers never see half an update."""

    jobs: dict[str, SlurmJob]
    nodes: tuple[SlurmNode, ...]
    switches: tuple[SlurmSwitch, ...]
    time: float

    @property
    def partitions(self) -> frozenset[str]:
        return frozenset(p for n in self.nodes for p in n.partitions)


def observe(rec: JobRecord, sj: SlurmJob) -> bool:
    """Copy what Slurm says into the record; True when anything a client can see changed."""
    before = (rec.state, rec.reason, rec.nodes, rec.exit_code, rec.restart_count, rec.start_time, rec.end_time)
    rec.name = sj.name or rec.name
    rec.state = sj.state
    rec.reason = sj.reason
    if sj.nodes or sj.state != JobState.PENDING:
        rec.nodes = sj.nodes
    else:
        rec.nodes = ()
    rec.partition = sj.partition or rec.partition
    rec.exit_code = sj.exit_code
    rec.exit_signal = sj.exit_signal
    rec.submit_time = sj.submit_time or rec.submit_time
    rec.start_time = sj.start_time
    rec.end_time = sj.end_time if sj.state.terminal else None  # Slurm reports the projected end
    rec.restart_count = max(rec.restart_count, sj.restart_count)
    if sj.excluded_nodes:
        rec.excluded_nodes = sj.excluded_nodes
    after = (rec.state, rec.reason, rec.nodes, rec.exit_code, rec.restart_count, rec.start_time, rec.end_time)
    return before != after


def _quiet(rec: JobRecord, sj: SlurmJob) -> bool:
    """Whether a poll may skip this record until Slurm's view of it or the record itself changes.

    Not when time alone calls for action: a held requeue is re-released, a running checkpointed
    job's progress is read, a decided requeue Slurm has not shown yet is re-sent.
    """
    if rec.phase is not Phase.SUBMITTED or sj.state.terminal or rec.needs_release:
        return False
    return not (sj.state == JobState.RUNNING and rec.spec.checkpoint_uri)


class QueuePoller:
    def __init__(
        self,
        backend: SlurmBackend,
        store: JobStore,
        bus: EventBus,
        *,
        interval: float,
        default_partition: str = "",
    ) -> None:
        self._backend = backend
        self._store = store
        self._bus = bus
        self._interval = interval
        self._default_partition = default_partition
        self._missing: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._polls = 0
        self.snapshot = ClusterSnapshot({}, (), (), 0.0)
        self.healthy = False
        self.on_transition: TransitionHook | None = None
        self.on_health: Callable[[bool], None] | None = None
        self.on_finish: Callable[[JobRecord], None] | None = None
        self.last_error = ""
        # Records whose last reconcile changed nothing and that need no periodic action, with the
        # Slurm view and store stamp they had: a poll skips them while both stay the same, so its
        # cost follows the jobs that changed, not the number of jobs in the queue.
        self._settled: dict[int, tuple[SlurmJob, float]] = {}

    @property
    def polls(self) -> int:
        return self._polls

    def facts(self) -> ClusterFacts:
        snap = self.snapshot
        return ClusterFacts(
            partitions=snap.partitions,
            nodes=frozenset(n.name for n in snap.nodes),
            default_partition=self._default_partition,
        )

    def kick(self) -> None:
        """Poll now instead of at the end of the interval (e.g. right after a submit or cancel)."""
        self._wake.set()

    async def poll_once(self) -> None:
        started = time.perf_counter()
        jobs = await self._backend.list_jobs()
        nodes = await self._backend.list_nodes()
        switches = self.snapshot.switches
        if self._polls % _TOPOLOGY_EVERY == 0:
            switches = tuple(await self._backend.topology())
        self.snapshot = ClusterSnapshot({j.job_id: j for j in jobs}, tuple(nodes), switches, time.time())
        self._polls += 1
        await self._reconcile()
        POLL_LATENCY.observe(time.perf_counter() - started)

    async def _reconcile(self) -> None:
        snap = self.snapshot
        states: Counter[str] = Counter()
        settled: dict[int, tuple[SlurmJob, float]] = {}
        for row in await self._store.live():
            sj = snap.jobs.get(row.job_id) if row.job_id else None
            if sj is not None and self._settled.get(row.record_id) == (sj, row.updated):
                # Slurm shows what it showed last time and nobody saved the record since: nothing to do.
                settled[row.record_id] = (sj, row.updated)
                states[sj.state.value] += 1
                continue
            lock = self._store.record_lock(row.record_id)
            if row.phase is Phase.SUBMITTING and lock.locked():
                states[JobState.PENDING.value] += 1
                continue  # its submit handler is still running sbatch
            async with lock:
                rec = await self._store.get_by_record(row.record_id)  # fresh: an RPC may have changed it
                if rec is not None and not rec.terminal:
                    await self._reconcile_one(rec, snap)
                if rec is not None and not rec.terminal and rec.phase is not Phase.FAILED:
                    states[rec.state.value] += 1
                    if sj is not None and _quiet(rec, sj):
                        settled[row.record_id] = (sj, row.updated)
        self._settled = settled
        for state in JobState:  # every state, so a state that emptied reads 0 rather than its last value
            JOBS_BY_STATE.labels(state=state.value).set(states[state.value])

    async def _reconcile_one(self, rec: JobRecord, snap: ClusterSnapshot) -> None:
        if rec.phase is Phase.SUBMITTING:
            await self._adopt_or_fail(rec)
            return
        sj = snap.jobs.get(rec.job_id)
        if sj is None:
            await self._handle_missing(rec)
            return
        self._missing.pop(rec.job_id, None)
        previous, before_nodes = rec.state, rec.nodes
        if observe(rec, sj):
            await self._store.save(rec)
            self._bus.publish(JobEvent(EventType.STATE_CHANGED, rec, previous_state=previous))
        if self.on_transition is not None:
            await self.on_transition(rec, before_nodes, sj)
        elif sj.state.terminal:
            await self.finish(rec, sj.state.value.lower())

    async def finish(self, rec: JobRecord, reason: str) -> None:
        """Mark a record terminal: supervision of it ends here."""
        self._missing.pop(rec.job_id, None)
        if self.on_finish is not None:
            self.on_finish(rec)
        rec.terminal = True
        rec.final_reason = reason
        await self._store.save(rec)
        self._bus.publish(JobEvent(EventType.FINISHED, rec, message=reason))

    async def _handle_missing(self, rec: JobRecord) -> None:
        count = self._missing.get(rec.job_id, 0) + 1
        self._missing[rec.job_id] = count
        if count < _MISSING_POLLS:
            return
        self._missing.pop(rec.job_id, None)
        previous = rec.state
        if not rec.state.terminal:
            rec.state = JobState.UNKNOWN
        self._bus.publish(JobEvent(EventType.STATE_CHANGED, rec, previous_state=previous))
        await self.finish(rec, "job left Slurm's queue")

    async def _adopt_or_fail(self, rec: JobRecord) -> None:
        """A submission that was in flight when the service stopped: find it in Slurm by its tag."""
        if time.time() - rec.created < _ADOPT_GRACE_SECONDS:
            return  # reserved an instant ago: its handler may not hold the record lock yet
        match = next((j for j in self.snapshot.jobs.values() if j.comment == rec.comment_tag), None)
        if match is not None:
            rec.job_id = match.job_id
            rec.phase = Phase.SUBMITTED
            observe(rec, match)
            log.info("re-adopted job %s for record %s", match.job_id, rec.record_id)
            await self._store.save(rec)
            self._bus.publish(JobEvent(EventType.SUBMITTED, rec))
        else:
            rec.phase = Phase.FAILED
            rec.error = "the service stopped before Slurm accepted the job; nothing was submitted"
            await self._store.save(rec)

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set, backing off while Slurm does not answer."""
        delay = self._interval
        while not stop.is_set():
            self._wake.clear()
            started = time.monotonic()
            try:
                await self.poll_once()
                delay = self._interval
                self.last_error = ""
                self._set_health(True)
            except SlurmError as exc:
                self.last_error = str(exc)
                log.warning("queue poll failed: %s", exc)
                delay = min(delay * 2, 30.0)
                self._set_health(False)
            except Exception as exc:
                log.exception("queue poll crashed")
                self.last_error = f"{type(exc).__name__}: {exc}"
                delay = min(delay * 2, 30.0)
                self._set_health(False)
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
            _, pending = await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            for fut in pending:
                fut.cancel()
            # Kicks (after submits, cancels) coalesce: a burst of submissions costs a few polls, not one each.
            gap = min(self._interval, _MIN_POLL_GAP) - (time.monotonic() - started)
            if gap > 0 and not stop.is_set():
                await asyncio.sleep(gap)

    def _set_health(self, ok: bool) -> None:
        if ok != self.healthy:
            self.healthy = ok
            if self.on_health is not None:
                self.on_health(ok)



