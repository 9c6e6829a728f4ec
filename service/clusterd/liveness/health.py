"""Node health across jobs: a node that keeps failing jobs is taken out of service, and only then.

Each failure pinned to a node (its death, a rank hang on it, a straggler verdict) is remembered for
``window_seconds``, with the job and its user. A node that failed ``jobs_to_drain`` different jobs
within the window is drained, with a reason naming them.

Who can make a node look bad matters: a hang, a step time and a straggler verdict are the job's
word, and a tenant can make its own rank hang or crawl on a node of its choice. So a failure is
either *evidence* (what clusterd saw itself: the node's slurmd refusing or the host gone,
confirmed by its own probe) or a *claim* (anything that rests on the job's beats). Evidence from
different jobs drains; claims count only when the failed jobs belong to at least two different
users, so one tenant's jobs alone never take a node from the others. A crash (a rank exiting
non-zero) is never pinned on a node: a user's own bad code fails on every node.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field

MAX_FAILURES_PER_NODE = 64  # remembered per node (the newest): a bound on what failures cost


@dataclass(frozen=True)
class Failure:
    node: str
    record_id: int
    job_id: str
    user: str
    kind: str  # "node death", "hang", "straggler"
    evidence: bool  # seen by clusterd itself (not the job's word)
    at: float = field(default_factory=time.time)


@dataclass
class NodeRecord:
    """One node's recent failures, and whether clusterd drained it for them."""

    failures: deque[Failure] = field(default_factory=lambda: deque(maxlen=MAX_FAILURES_PER_NODE))
    drained: str = ""  # the reason clusterd drained it with ("": not drained by clusterd)
    seen_drained: bool = False  # Slurm showed it drained since (a poll before that still shows it up)


class NodeHealth:
    def __init__(self, *, window_seconds: float = 3600.0, jobs_to_drain: int = 2) -> None:
        self._window = window_seconds
        self._jobs = max(2, jobs_to_drain)  # one job is never enough: it may be the job's own fault
        self._nodes: dict[str, NodeRecord] = {}

    def blame(self, failure: Failure) -> str | None:
        """Remember ``failure``; the reason to drain its node when that is now due (once), else None."""
        record = self._nodes.setdefault(failure.node, NodeRecord())
        record.failures.append(failure)
        self._expire(record, failure.at)
        if record.drained:
            return None
        reason = self._verdict(list(record.failures))
        if reason:
            record.drained = reason
        return reason

    def observe(self, node: str, *, out_of_service: bool) -> bool:
        """Slurm's view of a node clusterd drained; True once it is back in service (resumed after it
        was seen drained, by an operator): its past failures no longer count."""
        record = self._nodes.get(node)
        if record is None or not record.drained:
            return False
        if out_of_service:
            record.seen_drained = True
            return False
        if not record.seen_drained:
            return False
        del self._nodes[node]
        return True

    def drained(self) -> list[str]:
        """Nodes clusterd drained for their failures (until they are back in service)."""
        return [name for name, r in self._nodes.items() if r.drained]

    def summary(self, node: str) -> str:
        """What ``clusterctl nodes`` shows of the node's record: how many jobs failed there, how, and
        the drain. Every user sees it: other users' jobs are counted, not named."""
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
        return "; ".join(p for p in (failed, "drained by clusterd" if record.drained else "") if p)

    def records(self, now: float | None = None) -> dict[str, NodeRecord]:
        now = time.time() if now is None else now
        for record in self._nodes.values():
            self._expire(record, now)
        return {name: r for name, r in self._nodes.items() if r.failures or r.drained}

    def _expire(self, record: NodeRecord, now: float) -> None:
        while record.failures and now - record.failures[0].at > self._window:
            record.failures.popleft()

    def _verdict(self, failures: list[Failure]) -> str | None:
        by_job: dict[int, Failure] = {}
        for f in failures:  # a job's strongest failure: evidence over a claim
            if f.record_id not in by_job or (f.evidence and not by_job[f.record_id].evidence):
                by_job[f.record_id] = f
        evidence = [f for f in by_job.values() if f.evidence]
        if len(evidence) >= self._jobs:
            counted = evidence
        elif len(by_job) >= self._jobs and len({f.user for f in by_job.values()}) >= 2:
            counted = list(by_job.values())
        else:
            return None
        # Slurm shows the reason to everyone: the jobs are named, their users only counted.
        jobs = ", ".join(f"job {f.job_id} ({f.kind})" for f in sorted(counted, key=lambda f: f.at))
        users = len({f.user for f in counted})
        who = f"{users} user{'s' if users > 1 else ''}"
        return f"failed {len(counted)} jobs of {who} within {self._window / 3600:g}h: {jobs}"
