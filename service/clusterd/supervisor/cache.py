"""The one queue poll: Slurm's queue and nodes, fetched once per interval and cached.

Every interval the cache asks Slurm for the queue once (the node list when it can have changed,
the switch tree every ``_TOPOLOGY_EVERY`` polls), swaps in an immutable snapshot, and hands it to
the listeners that subscribed. Where the release can filter the queue and a focus is set (the job ids
the service follows), a poll reads only what can have changed (SlurmBackend.poll_jobs) and the
whole queue every ``_WHOLE_EVERY_SECONDS`` or ``_WHOLE_COST_FACTOR`` times its last read's time, at
most ``_WHOLE_MAX_GAP_SECONDS`` (unless Slurm said no job changed since the last whole one, as
slurmrestd's ``update_time`` does), and always after a poll that failed past its queue read (the
backend's "changed since" mark may have moved past a change no snapshot holds): on a big cluster
the bulk of the queue is other users' pending jobs, and re-reading them every interval would cost
seconds of slurmctld's and clusterd's time. Nodes, likewise, are read when a job started, ended or
changed outside PENDING (what moves their allocations, and how a node's death shows), is still
releasing its nodes or is a followed run that ended and awaits its decision, while a recovery
hurries the polls, and every ``_NODES_EVERY_SECONDS`` otherwise (a drain, a node down with no job
on it). RPCs read this cache; nothing else in the service asks Slurm about the queue,
so slurmctld's load does not grow with the number of watchers. The cache knows nothing of the store
or of restarts: the reconciler is one of its subscribers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from clusterd.errors import SlurmError
from clusterd.observability.metrics import POLL_LATENCY
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.topology_text import TopologyParseError
from clusterd.slurm.types import ClusterFacts, JobPoll, JobState, NodeState, SlurmJob, SlurmNode, SlurmSwitch

log = logging.getLogger(__name__)

_TOPOLOGY_EVERY = 30  # polls between topology refreshes: the switch tree rarely changes
_MIN_POLL_GAP = 0.5  # seconds between poll starts, however often the cache is kicked
_MAX_BACKOFF = 30.0  # seconds between polls while Slurm does not answer
# Seconds between whole-queue reads when polls are partial: how stale another user's PENDING job
# (a new one, a hold, a requeue of one) may be in queue listings; never the service's own jobs.
_WHOLE_EVERY_SECONDS = 60.0
# ... and at least this many times the last whole read's duration: a queue whose whole read takes
# 20 s (10,000 jobs on a loaded host) holds the polls up for at most 5% of the time.
_WHOLE_COST_FACTOR = 20.0
# ... but never more than this apart: the duration is wall time, and one read stalled by the event
# loop must not leave other users' jobs stale for many minutes (reads over 15 s then cost over 5%).
_WHOLE_MAX_GAP_SECONDS = 300.0
# Seconds at least between two whole reads asked for (want_whole): callers asking at once share one,
# and a user who keeps adopting ids that do not exist cannot make every poll a whole read.
_WANTED_WHOLE_GAP = 5.0
# Seconds between node reads while no job moves and no recovery hurries: how stale a drain or a
# node down without jobs may be in placement and listings (256 nodes: ~0.1 s of CPU a read).
_NODES_EVERY_SECONDS = 10.0
# Jobs in these states are releasing their nodes: Slurm may mark one of them DOWN after the job's
# own change was seen, and the reconciler judges the job's end by the node states it sees next.
_SETTLING = frozenset({JobState.COMPLETING, JobState.REQUEUED})


@dataclass(frozen=True)
class ClusterSnapshot:
    """The latest poll: immutable, swapped whole so readers never see half an update."""

    jobs: dict[str, SlurmJob]
    nodes: tuple[SlurmNode, ...]
    switches: tuple[SlurmSwitch, ...]
    time: float
    whole: bool = True  # its jobs come from a whole-queue read; else other users' PENDING jobs may be stale

    @functools.cached_property
    def arrays(self) -> dict[str, tuple[SlurmJob, ...]]:
        """Array id -> its elements in this poll (started tasks and the pending range record)."""
        out: dict[str, list[SlurmJob]] = {}
        for job in self.jobs.values():
            if job.array_job_id:
                out.setdefault(job.array_job_id, []).append(job)
        return {k: tuple(v) for k, v in out.items()}

    @functools.cached_property
    def node_map(self) -> dict[str, SlurmNode]:
        return {n.name: n for n in self.nodes}

    @property
    def partitions(self) -> frozenset[str]:
        return frozenset(p for n in self.nodes for p in n.partitions)

    @property
    def down_nodes(self) -> frozenset[str]:
        return frozenset(n.name for n in self.nodes if n.state == NodeState.DOWN)


class SnapshotListener(Protocol):
    """Told about every fresh snapshot, in subscription order, within the poll that made it."""

    async def on_snapshot(self, snapshot: ClusterSnapshot) -> None: ...


HealthListener = Callable[[bool], None]
# The job ids the service follows, asked before each poll; None: read the whole queue, as without one.
Focus = Callable[[], Awaitable[frozenset[str] | None]]


def _active(jobs: dict[str, SlurmJob]) -> dict[str, SlurmJob]:
    """The jobs outside PENDING: the ones whose changes move nodes' allocations and states."""
    return {k: j for k, j in jobs.items() if j.state != JobState.PENDING}


def _settling(job: SlurmJob, focus: frozenset[str]) -> bool:
    """Whether ``job``'s nodes may still change what is decided about it: releasing them, or a
    followed run that ended (its decision can wait on a progress read while a dead node shows DOWN;
    its record leaves the focus once decided). An array's tasks are judged without that wait."""
    return job.state in _SETTLING or (job.state.terminal and job.job_id in focus and not job.in_array)


def merge(previous: dict[str, SlurmJob], poll: JobPoll, focus: frozenset[str]) -> dict[str, SlurmJob]:
    """The queue after a look: a whole one replaces it, an unchanged one keeps it; a partial one keeps
    only the PENDING jobs it does not cover (other users' jobs outside the focus) and adds what it lists.

    A job a partial look covers and does not list is gone: it left slurmctld's memory, or went
    back to PENDING (a requeue) and is someone else's, shown again at the next whole look.
    """
    if poll.unchanged:
        return dict(previous)
    if poll.whole:
        return {j.job_id: j for j in poll.jobs}
    out = {
        k: j
        for k, j in previous.items()
        if j.state == JobState.PENDING and j.job_id not in focus and j.array_job_id not in focus
    }
    out.update((j.job_id, j) for j in poll.jobs)
    return out


class QueueCache:
    """Polls Slurm (with backoff), serves facts/nodes/topology, publishes snapshots to subscribers."""

    def __init__(self, backend: SlurmBackend, *, interval: float, default_partition: str = "") -> None:
        self._backend = backend
        self._interval = interval
        self._default_partition = default_partition
        self._wake = asyncio.Event()
        self._hurry_until = 0.0
        self._polls = 0
        self._topology_failing = False  # the last topology fetch failed (logged once per bad spell)
        self._listeners: list[SnapshotListener] = []
        self._focus: Focus | None = None
        self._last_whole = -float("inf")  # time.monotonic() of the last whole-queue read
        self._whole_took = 0.0  # seconds the last whole read (list_jobs) took
        self._whole_wanted = False
        # A poll failed after its jobs read: the backend may have moved its "changed since" stamp
        # past changes no snapshot holds, so the next poll reads the whole queue.
        self._behind = False
        self.whole_polls = 0  # polls that read the whole queue (the rest were partial)
        self._nodes_read = -float("inf")  # time.monotonic() of the last node read
        self._active: dict[str, SlurmJob] = {}  # the last snapshot's jobs outside PENDING
        # The partial look (its jobs, the focus) merged into the last snapshot; None after any other.
        self._merged: tuple[tuple[SlurmJob, ...], frozenset[str]] | None = None
        self._health_listeners: list[HealthListener] = []
        self.snapshot = ClusterSnapshot({}, (), (), 0.0)
        self.slurm_release: tuple[int, int] | None = None  # set once the release is known
        self.healthy = False
        self.last_error = ""

    def subscribe(self, listener: SnapshotListener) -> None:
        """Have ``listener`` told about every snapshot from the next poll on."""
        self._listeners.append(listener)

    def focus_on(self, focus: Focus) -> None:
        """Let polls read only what can change (see the module doc) around the ids ``focus`` gives."""
        self._focus = focus

    def want_whole(self) -> None:
        """Read the whole queue at the next poll (a job of any user's that appeared a moment ago)."""
        self._whole_wanted = True
        self._wake.set()

    async def whole_look(self, timeout: float) -> ClusterSnapshot:
        """The first snapshot from a whole-queue read from now on (the current one after ``timeout``)."""
        before = self.snapshot
        self.want_whole()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            snap = self.snapshot
            if snap is not before and snap.whole:
                return snap
            await asyncio.sleep(0.05)
        return self.snapshot

    def subscribe_health(self, listener: HealthListener) -> None:
        """Have ``listener`` told whenever Slurm starts or stops answering polls."""
        self._health_listeners.append(listener)

    @property
    def polls(self) -> int:
        return self._polls

    def facts(self) -> ClusterFacts:
        snap = self.snapshot
        return ClusterFacts(
            partitions=snap.partitions,
            nodes=frozenset(n.name for n in snap.nodes),
            default_partition=self._default_partition,
            slurm_release=self.slurm_release,
        )

    def kick(self) -> None:
        """Poll now instead of at the end of the interval (after a cancel, a requeue).

        Not after a submit: the record already says PENDING, and a submit storm would turn the one
        poll per interval into one every ``_MIN_POLL_GAP``, each reading the whole queue while
        slurmctld is busiest (bench/README.md)."""
        self._wake.set()

    def hurry(self, seconds: float) -> None:
        """Poll as often as allowed (every ``_MIN_POLL_GAP``) for ``seconds``, starting now.

        A recovery in flight needs each of Slurm's steps seen at once (the requeued job leaving
        COMPLETING, held on BeginTime, running again); a normal interval would add its length to
        every one of them.
        """
        self._hurry_until = max(self._hurry_until, time.monotonic() + seconds)
        self._wake.set()

    async def poll_once(self) -> None:
        """One look at the queue (+ the nodes when due, the topology now and then), then every subscriber.

        Raises when Slurm's queue or nodes cannot be read. A failing topology fetch keeps the
        previous switch tree and a failing subscriber is logged: neither says Slurm is unhealthy.
        """
        started = time.perf_counter()
        jobs, whole, focus = await self._jobs()
        try:
            active = self._active if jobs is self.snapshot.jobs else _active(jobs)
            moved = active != self._active or any(_settling(j, focus) for j in active.values())
            nodes = await self._nodes(moved=moved)
            switches = self.snapshot.switches
            if self._polls % _TOPOLOGY_EVERY == 0:
                switches = await self._topology(switches)
        except BaseException:
            self._behind = True
            self._merged = None  # the merge never reached a snapshot
            raise
        self.snapshot = ClusterSnapshot(jobs, nodes, switches, time.time(), whole)
        self._behind = False
        self._active = active
        self._polls += 1
        for listener in self._listeners:
            try:
                await listener.on_snapshot(self.snapshot)
            except Exception:  # a bug or a store error in a subscriber, not Slurm failing
                log.exception("snapshot subscriber %s failed", type(listener).__name__)
        POLL_LATENCY.observe(time.perf_counter() - started)

    async def _nodes(self, *, moved: bool) -> tuple[SlurmNode, ...]:
        """Slurm's nodes, read in the same poll as the queue when a job ``moved`` (a job that ended
        on a dead node is judged by this snapshot's node states), while hurried, and when
        ``_NODES_EVERY_SECONDS`` passed; else the last read's."""
        now = time.monotonic()
        if moved or now < self._hurry_until or now - self._nodes_read >= _NODES_EVERY_SECONDS:
            nodes = tuple(await self._backend.list_nodes())
            self._nodes_read = now
            return nodes
        return self.snapshot.nodes

    async def _jobs(self) -> tuple[dict[str, SlurmJob], bool, frozenset[str]]:
        """The queue after this poll's look (whole when due, wanted, after a failed poll, or nothing
        is in focus), whether it is complete (read whole, or Slurm said nothing changed since a
        whole read), and the ids in focus."""
        focus = await self._focus() if self._focus is not None else None
        now = time.monotonic()
        since = now - self._last_whole
        gap = max(_WHOLE_EVERY_SECONDS, min(_WHOLE_COST_FACTOR * self._whole_took, _WHOLE_MAX_GAP_SECONDS))
        due = since >= gap or self._behind
        if focus is None or due or (self._whole_wanted and since >= _WANTED_WHOLE_GAP):
            wanted = self._whole_wanted
            self._whole_wanted = False  # a want_whole() during the read asks for the next one too
            try:
                jobs = await self._backend.list_jobs()
            except BaseException:
                self._whole_wanted = self._whole_wanted or wanted
                raise
            self._last_whole = now
            self._merged = None
            took = time.monotonic() - now
            # A read far quicker than the last (slurmrestd: "no job changed since") says little of
            # what the next real one costs: it halves the cost kept instead of replacing it.
            self._whole_took = took if took >= self._whole_took / 2 else self._whole_took / 2
            self.whole_polls += 1
            return {j.job_id: j for j in jobs}, True, focus or frozenset()
        poll = await self._backend.poll_jobs(focus)
        if poll.standing and self._merged == (poll.jobs, focus):
            # the look this snapshot merged, again: merging it twice gives the same queue (10,000
            # jobs: ~5 ms a poll spared)
            return self.snapshot.jobs, False, focus
        complete = poll.whole or (poll.unchanged and self.snapshot.whole and not self._behind)
        if complete:  # Slurm's "nothing changed" covers every job: as good as a whole read
            self._last_whole = now
        self.whole_polls += poll.whole
        self._merged = (poll.jobs, focus) if not (poll.whole or poll.unchanged) else None
        return merge(self.snapshot.jobs, poll, focus), complete, focus

    async def _topology(self, previous: tuple[SlurmSwitch, ...]) -> tuple[SlurmSwitch, ...]:
        """A fresh switch tree, or ``previous`` while it cannot be fetched or parsed (retried next refresh)."""
        try:
            switches = tuple(await self._backend.topology())
        except (SlurmError, TopologyParseError) as exc:
            if not self._topology_failing:
                log.warning("switch topology unreadable, keeping the previous one: %s", exc)
            self._topology_failing = True
            return previous
        if self._topology_failing:
            log.info("switch topology readable again")
        self._topology_failing = False
        return switches

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
                self.set_health(True)
            except SlurmError as exc:
                self.last_error = str(exc)
                log.warning("queue poll failed: %s", exc)
                delay = min(delay * 2, _MAX_BACKOFF)
                self.set_health(False)
            except Exception as exc:
                log.exception("queue poll crashed")
                self.last_error = f"{type(exc).__name__}: {exc}"
                delay = min(delay * 2, _MAX_BACKOFF)
                self.set_health(False)
            if time.monotonic() < self._hurry_until:
                delay = min(delay, _MIN_POLL_GAP)
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
            _, pending = await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            for fut in pending:
                fut.cancel()
            # Kicks (after cancels, requeues) coalesce: a burst of them costs a few polls, not one each.
            gap = min(self._interval, _MIN_POLL_GAP) - (time.monotonic() - started)
            if gap > 0 and not stop.is_set():
                await asyncio.sleep(gap)

    def set_health(self, ok: bool) -> None:
        """Record whether Slurm answers; health listeners hear only changes."""
        if ok != self.healthy:
            self.healthy = ok
            for listener in self._health_listeners:
                listener(ok)
