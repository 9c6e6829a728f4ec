"""Node health across jobs: a node that keeps failing jobs is taken out of service, and only then.

Each failure pinned to a node (its death, a rank hang on it, a straggler verdict) is remembered for
``window_seconds``, with the job and its user. Failures on one node within ``event_seconds`` of
each other are one event (a node death with two jobs on it is one failure, not two). A node is
drained when ``jobs_to_drain`` (at least 2) different jobs failed there in as many events, and
at least one of those failures is *evidence*: what clusterd saw itself (the node's slurmd refusing
or the host gone, confirmed by its own probe, or Slurm showing it DOWN).

Who can make a node look bad matters: a hang, a step time and a straggler verdict are the job's
word (a *claim*), and a tenant, two colluding accounts, or a neighbour's CPU hog can make a rank
hang or crawl on a node of their choice. Claims alone never drain: a node with claims only is a
*suspect*, shown as such. A crash (a rank exiting non-zero) is never pinned on a node: a user's own
bad code fails on every node.

Draining is the caller's (liveness.detector): a node counts as drained once the drain succeeded.
Returning it is the health probe's (liveness.repair): a probe that passes clears the node's record
and notes when it returned; one that fails leaves it drained until the next.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field

MAX_FAILURES_PER_NODE = 64  # remembered per node (the newest): a bound on what failures cost
EVENT_SECONDS = 60.0  # failures on one node this close in time are one event
# What clusterd's own drains say in Slurm (no tenant sets a node's reason): a node Slurm shows drained
# with such a reason was drained by clusterd, also by a clusterd that ran before this one.
DRAIN_REASONS = ("clusterd: failed ", "clusterd: health probe ")


@dataclass(frozen=True)
class Failure:
    node: str
    record_id: int
    job_id: str
    user: str
    kind: str  # "node death", "hang", "straggler"
    evidence: bool  # seen by clusterd itself (not the job's word)
    at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Verdict:
    """Why a node is due to be drained: ``reason`` goes to Slurm, where every user reads it (counts
    only); ``jobs`` names the jobs, for clusterd's own log."""

    reason: str
    jobs: str


@dataclass
class NodeRecord:
    """One node's recent failures, and whether clusterd drained it for them."""

    failures: deque[Failure] = field(default_factory=lambda: deque(maxlen=MAX_FAILURES_PER_NODE))
    drained: str = ""  # the reason clusterd drained it with ("": not drained by clusterd)
    drained_at: float = 0.0
    seen_drained: bool = False  # Slurm showed it drained since (a poll before that still shows it up)
    probing: bool = False  # its health probe runs now (the node is resumed inside a reservation)
    probed_at: float = 0.0  # when its last probe ended
    probe: str = ""  # how its last probe ended ("" : not probed yet)
    returned_at: float = 0.0  # when a passing probe returned it to service
    since: float = 0.0  # when it was last back in service: older failures (recalled again) never count


class NodeHealth:
    def __init__(
        self, *, window_seconds: float = 3600.0, jobs_to_drain: int = 2, event_seconds: float = EVENT_SECONDS
    ) -> None:
        self._window = window_seconds
        self._jobs = max(2, jobs_to_drain)  # one job is never enough: it may be the job's own fault
        self._event = event_seconds
        self._nodes: dict[str, NodeRecord] = {}

    @property
    def window(self) -> float:
        return self._window

    def blame(self, failure: Failure) -> Verdict | None:
        """Remember ``failure``; why to drain its node when that is now due, else None. The node counts
        as drained only once :meth:`drained_for` says the drain was done: until then each new failure
        asks again."""
        record = self._nodes.setdefault(failure.node, NodeRecord())
        record.failures.append(failure)
        self._expire(record, failure.at)
        if record.drained:
            return None
        return self._verdict(list(record.failures))

    def remember(self, failure: Failure) -> None:
        """Remember ``failure`` without asking for a verdict (a failure recalled from the store: its
        drain, if one was due, happened then or is asked for again at the node's next failure). One
        from before the node was last back in service, or already remembered, is left out: recalling
        again (a leadership gained) changes nothing."""
        record = self._nodes.setdefault(failure.node, NodeRecord())
        if failure.at <= record.since or failure in record.failures:
            return
        record.failures.append(failure)
        self._expire(record, time.time())

    def settle(self, node: str) -> None:
        """Slurm shows ``node`` in service: when its failures already called for a drain, it was
        drained and returned since (by its probe or an operator), and its record starts anew."""
        record = self._nodes.get(node)
        if record is not None and not record.drained and self._verdict(list(record.failures)) is not None:
            self._nodes[node] = NodeRecord(since=time.time())

    def drained_for(self, node: str, verdict: Verdict) -> None:
        """The drain of ``node`` for ``verdict`` succeeded."""
        record = self._nodes.setdefault(node, NodeRecord())
        record.drained, record.drained_at, record.returned_at = verdict.reason, time.time(), 0.0

    def adopt(self, node: str, reason: str) -> bool:
        """Slurm shows ``node`` drained with ``reason``: True when that is one of clusterd's own drains
        (DRAIN_REASONS) this record did not know of (a clusterd before this one drained it): from now
        on it is probed and shown as drained by clusterd."""
        record = self._nodes.get(node)
        if (record is not None and record.drained) or not reason.startswith(DRAIN_REASONS):
            return False
        record = self._nodes.setdefault(node, NodeRecord())
        why = reason.removeprefix("clusterd: ")
        if why.startswith("health probe"):  # "health probe failed (...); <the verdict>"
            why = why.partition("; ")[2] or why
        record.drained, record.drained_at, record.seen_drained = why, time.time(), True
        return True

    def observe(self, node: str, *, out_of_service: bool) -> bool:
        """Slurm's view of a node clusterd drained; True once it is back in service (resumed after it
        was seen drained, by an operator): its past failures no longer count. While its probe runs the
        node is resumed by clusterd itself: that says nothing."""
        record = self._nodes.get(node)
        if record is None or not record.drained or record.probing:
            return False
        if out_of_service:
            record.seen_drained = True
            return False
        if not record.seen_drained:
            return False
        self._nodes[node] = NodeRecord(since=time.time())
        return True

    def drained(self) -> list[str]:
        """Nodes clusterd drained for their failures (until they are back in service)."""
        return [name for name, r in self._nodes.items() if r.drained]

    def reason(self, node: str) -> str:
        """Why clusterd drained ``node`` ("" when it did not)."""
        record = self._nodes.get(node)
        return record.drained if record is not None else ""

    def due_for_probe(self, interval: float, now: float | None = None) -> list[str]:
        """Drained nodes, seen drained in Slurm, whose probe is due: ``interval`` after the drain and
        after each failing probe."""
        now = time.time() if now is None else now
        return [
            name
            for name, r in self._nodes.items()
            if r.drained and r.seen_drained and not r.probing and now - max(r.drained_at, r.probed_at) >= interval
        ]

    def probe_started(self, node: str) -> None:
        self._nodes.setdefault(node, NodeRecord()).probing = True

    def probe_failed(self, node: str, how: str) -> None:
        """The probe failed (``how``) and the node is drained still, or again. A poll taken while it
        was resumed may still show it in service: that is not an operator's resume, so it must be
        seen drained again first."""
        record = self._nodes.setdefault(node, NodeRecord())
        record.probing, record.seen_drained = False, False
        record.probed_at, record.probe = time.time(), how

    def returned(self, node: str) -> None:
        """Its probe passed and the node is in service again: its past failures no longer count."""
        now = time.time()
        self._nodes[node] = NodeRecord(probed_at=now, probe="passed", returned_at=now, since=now)

    def summary(self, node: str) -> str:
        """What ``clusterctl nodes`` shows of the node's record: how many jobs failed there, how, and
        whether it is drained or only a suspect (claims only, or too few events to drain). Every
        user sees it: other users' jobs are counted, not named."""
        record = self._nodes.get(node)
        if record is None:
            return ""
        self._expire(record, time.time())
        kinds: dict[int, str] = {}
        for f in record.failures:
            kinds.setdefault(f.record_id, f.kind)
        counts = Counter(kinds.values())
        how = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        failed = f"failed {len(kinds)} job{'s' if len(kinds) != 1 else ''} ({how})" if kinds else ""
        state = "drained by clusterd" if record.drained else ("suspect" if kinds else "")
        probe = ""
        if record.probing:
            probe = "health probe running"
        elif record.drained and record.probe:
            probe = f"health probe {record.probe} at {_clock(record.probed_at)}"
        elif record.returned_at:
            probe = f"returned to service at {_clock(record.returned_at)} (health probe passed)"
        return "; ".join(p for p in (failed, state, probe) if p)

    def _expire(self, record: NodeRecord, now: float) -> None:
        while record.failures and now - record.failures[0].at > self._window:
            record.failures.popleft()

    def _verdict(self, failures: list[Failure]) -> Verdict | None:
        by_job: dict[int, Failure] = {}
        for f in failures:  # a job's strongest failure: evidence over a claim
            if f.record_id not in by_job or (f.evidence and not by_job[f.record_id].evidence):
                by_job[f.record_id] = f
        # Events: failures of different jobs at distinct times (one death fails every job on the node).
        events: list[list[Failure]] = []
        for f in sorted(by_job.values(), key=lambda f: f.at):
            if events and f.at - events[-1][0].at <= self._event:
                events[-1].append(f)
            else:
                events.append([f])
        if len(events) < self._jobs or not any(f.evidence for event in events for f in event):
            return None
        counted = [f for event in events for f in event]
        users = len({f.user for f in counted})
        kinds = Counter(f.kind for f in counted)
        how = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        reason = (
            f"failed {len(counted)} jobs of {users} user{'s' if users > 1 else ''} in {len(events)} events "
            f"within {self._window / 3600:g}h ({how})"
        )
        return Verdict(reason, ", ".join(f"job {f.job_id} ({f.kind})" for f in counted))


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
