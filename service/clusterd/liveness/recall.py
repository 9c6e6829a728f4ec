"""Node health across a clusterd restart: the failures are rebuilt from the restarts in the store.

The detector scores what it decided (liveness.detector._score), and every decision it acts on is
recorded as a restart of the job, so the restarts within the health window say again what failed
where, and for whom:

- a node death clusterd confirmed (NODE_FAILURE detected by "heartbeat+probe"): each failed node,
  as evidence;
- a rank hang (RANK_HUNG by "progress" or "heartbeat"): the nodes its detail names (clusterd's own
  first line, "rank R on NODE at step S" / "rank R on NODE silent"), as a claim, only when they are
  fewer than the run's nodes (a hang is never pinned on every node of its run).

A hang's detail names at most 8 ranks ("... (+N more)"): such a hang is not rebuilt at all, since
the nodes of the ranks left out are unknown and the named ones may be every node of the run.

Straggler verdicts are not recorded with a restart and are not rebuilt (they are claims: they
never drain alone). Whether clusterd drained a node is Slurm's to say (liveness.health.adopt).

Recall runs at start and again whenever this replica gains the leadership (the old leader's failures
since this one started are in the store). Failures from before a node was last back in service in
this process (a passing probe, an operator's resume) are left out (NodeHealth.remember); across a
restart of clusterd that fact is not kept, and a node in service whose recalled failures call for a
drain is taken as returned since (NodeHealth.settle).
"""

from __future__ import annotations

import logging
import re
import time

from clusterd.liveness.health import Failure, NodeHealth
from clusterd.model.causes import Cause
from clusterd.store.jobs import JobRecords
from clusterd.store.records import RestartEntry

log = logging.getLogger(__name__)

_HUNG_ON = re.compile(r"\brank \d+ on (\S+) at step |^ranks? [\d,]+ on (\S+) silent ")
_CUT = re.compile(r"\(\+\d+ more\)")  # a hang's detail naming only its first ranks


async def recall(health: NodeHealth, store: JobRecords, now: float | None = None) -> int:
    """Remember in ``health`` the failures of the restarts within its window; how many."""
    since = (time.time() if now is None else now) - health.window
    count = 0
    for record_id, job_id, user, entry in await store.restarts_since(since):
        for failure in failures_of(record_id, job_id, user, entry):
            health.remember(failure)
            count += 1
    if count:
        log.info("node health: %d failures recalled from the restarts of the last %gs", count, health.window)
    return count


def failures_of(record_id: int, job_id: str, user: str, entry: RestartEntry) -> list[Failure]:
    """The failures ``entry`` pins on nodes, as the detector scored them when it decided."""
    if entry.cause is Cause.NODE_FAILURE and entry.detected_by == "heartbeat+probe":
        return [
            Failure(node, record_id, job_id, user, "node death", evidence=True, at=entry.time)
            for node in entry.failed_nodes
        ]
    if entry.cause is Cause.RANK_HUNG and entry.detected_by in ("progress", "heartbeat"):
        first = entry.detail.split("\n", 1)[0]
        if _CUT.search(first):
            return []
        nodes = sorted({a or b for a, b in _HUNG_ON.findall(first)})
        if nodes and len(nodes) < entry.nodes_before:
            return [Failure(node, record_id, job_id, user, "hang", evidence=False, at=entry.time) for node in nodes]
    return []
