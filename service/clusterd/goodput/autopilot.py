"""The checkpoint interval autopilot: Young/Daly's sqrt(2 x stall x MTBF), bounded.

The stall is the job's own: the mean time its slowest rank blocked in save(), as its beats claim it
(clusterd clamps the claim to the run's age). The MTBF is what clusterd itself saw: each node's
failures within a sliding window, over the time it watched, with a prior of one failure per
``prior_node_mtbf_seconds`` so a node never seen failing is not taken as immortal. Only node failures
count (dead nodes clusterd or Slurm decided on): a tenant's crashing or hanging ranks must not change
the advice other tenants get on the same nodes. A job fails when any of its nodes does, so their
rates add up. A node's failure is counted once however many jobs it ended (each job's restart notes
it): notes within ten minutes of each other are one failure, unless its slurmd started anew in
between. The answer is clamped to [floor, ceiling] (config section [goodput]): a claimed stall of
zero cannot make ranks save every step, a huge one cannot stop them saving.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from clusterd.config import GoodputConfig

if TYPE_CHECKING:
    from clusterd.liveness.table import Run

_MAX_NODES = 100_000  # nodes whose failures are remembered (oldest forgotten first)
_MAX_PER_NODE = 64  # failures kept per node within the window (the newest)
# A node's death is noted once per job it ran (a tenant's many small jobs must not multiply it): notes
# this close to one already noted, with the same slurmd start, are that one (a Slurm-decided failure
# is noted up to SlurmdTimeout after a heartbeat-decided one).
_SAME_FAILURE_SECONDS = 600.0


def young_daly(stall: float, mtbf: float, config: GoodputConfig) -> float:
    """sqrt(2 x stall x MTBF) clamped to [floor, ceiling] (either input non-finite or <= 0: the floor
    or ceiling it implies)."""
    floor, ceiling = config.interval_floor_seconds, config.interval_ceiling_seconds  # floor <= ceiling: checked at load
    if not math.isfinite(stall) or not math.isfinite(mtbf):
        return ceiling
    return min(ceiling, max(floor, math.sqrt(2.0 * max(0.0, stall) * max(0.0, mtbf))))


class FailureHistory:
    """Failures clusterd decided on, per node, within a sliding window; held in memory and rebuilt
    from the store's restart records when a service starts or takes the lead (:mod:`.failures`)."""

    def __init__(
        self,
        config: GoodputConfig,
        *,
        clock: Callable[[], float] = time.time,
        boot: Callable[[str], float] = lambda _node: 0.0,
    ) -> None:
        """``boot``: when a node's slurmd last started, as Slurm shows it now (0: not known)."""
        self._config = config
        self._clock = clock
        self._boot = boot
        self._since = clock()
        self._failures: dict[str, deque[tuple[float, float]]] = {}  # node -> (when, its slurmd's start)

    @property
    def window_seconds(self) -> float:
        """How far back failures count."""
        return self._config.failure_window_seconds

    def watched_since(self, when: float) -> None:
        """This cluster was watched from ``when`` on (earlier than this history's start: it counts)."""
        if math.isfinite(when):
            self._since = min(self._since, when)

    def note(self, nodes: Iterable[str], when: float, *, known_boot: bool = True) -> None:
        """A failure of ``nodes`` at ``when`` (in any order of time: each node's list stays sorted).

        One death of a node is noted by every job it ended: a note within _SAME_FAILURE_SECONDS of
        one already noted is that failure, unless the node's slurmd started anew in between (it
        died, came back and died again). ``known_boot`` False: the slurmd start Slurm shows now is
        not the one of this failure (a failure read back from the store), so it is left unknown.
        """
        if not math.isfinite(when):
            return
        for node in set(nodes):
            boot = self._boot(node) if known_boot else 0.0
            seen = self._failures.pop(node, None) or deque()
            i = bisect.bisect_left(seen, when, key=lambda f: f[0])
            near = [f for f in (seen[i - 1] if i > 0 else None, seen[i] if i < len(seen) else None) if f]
            same = any(abs(t - when) < _SAME_FAILURE_SECONDS and (boot <= 0 or b <= 0 or b == boot) for t, b in near)
            if not same:
                seen.insert(i, (when, boot))
                while len(seen) > _MAX_PER_NODE:
                    seen.popleft()
            self._failures[node] = seen  # re-inserted: the dict's order is least recently failed first
            while len(self._failures) > _MAX_NODES:
                self._failures.pop(next(iter(self._failures)))

    def job_mtbf(self, nodes: Iterable[str]) -> float:
        """Mean time between failures of a job on ``nodes``: the sum of their rates, inverted."""
        now = self._clock()
        c = self._config
        window, prior = c.failure_window_seconds, max(1.0, c.prior_node_mtbf_seconds)
        watched = max(0.0, min(now - self._since, window))
        rate = 0.0
        count = 0
        for node in set(nodes):
            count += 1
            seen = self._failures.get(node)
            while seen and now - seen[0][0] > window:  # oldest first: what fell out of the window goes
                seen.popleft()
            if seen is not None and not seen:
                del self._failures[node]
            recent = len(seen) if seen else 0
            # (failures + one prior failure) over (watched time + the prior's time)
            rate += (recent + 1) / (watched + prior)
        return 1.0 / rate if count else prior


class Autopilot:
    """The interval to advise a run: from its stall per save and its nodes' failure history."""

    def __init__(self, history: FailureHistory, config: GoodputConfig) -> None:
        self.history = history
        self._config = config

    def advise(self, stall_per_save: float | None, nodes: Iterable[str]) -> float | None:
        """None until the run saved once (no stall measured: nothing to base advice on)."""
        if stall_per_save is None:
            return None
        return young_daly(stall_per_save, self.history.job_mtbf(nodes), self._config)

    def for_run(self, run: Run) -> float | None:
        """The advice for one run of a job: its ranks' stall claims, the nodes they beat from."""
        return self.advise(run.stall_per_save(), {b.node for b in run.ranks.values()})
