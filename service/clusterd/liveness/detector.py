"""Turn heartbeats into decisions: a dead node, a hung rank, a crashed rank.

Every ``check_every`` seconds, for each run whose job Slurm shows RUNNING in that same run:

- a rank that reported its own exit with a failure status -> RANK_FAILED (its node is fine), or
  NODE_FAILURE when another node of the run is dead (probed at once): a peer's death fails the
  survivors' collectives before its silence shows;
- ranks silent for ``suspect_after`` intervals make their node a suspect. A node where another
  job's ranks still beat is alive. Otherwise it is probed twice (liveness.probe): dead both times
  (slurmd refuses, or neither slurmd nor the host answers), or already DOWN in Slurm ->
  NODE_FAILURE of that node, to be DRAINed rather than marked DOWN when another user's job runs
  there;
- a silent rank on a node that is alive -> RANK_HUNG once its silence passes the hang timeout:
  that job alone is restarted;
- ranks that beat while their step stays put (a collective that never returns, a deadlock in the
  main thread while the beat thread runs) for ``progress_factor`` times their step time, and at
  least ``progress_floor`` seconds -> their stacks are asked for (the beat thread sends them), then
  RANK_HUNG "by progress", naming the ranks that stopped while others went on, or else those
  whose main thread stands elsewhere than their peers' (liveness.progress).

Step times also name stragglers (liveness.progress): a verdict is logged and counted; with
``evict_stragglers`` each is handed to the restarter once, which leaves the node out when that pays
(liveness.eviction). Node deaths, hangs pinned to a node and straggler verdicts are scored across jobs
(liveness.health): a node that keeps failing jobs is drained, never on jobs' claims alone (a node
death clusterd confirmed itself must be among the failures). A hang of a single-node job is never
pinned on its node: the job's own deadlock would look the same.

What a job says (its beats, its silence) decides only about that job. Taking a node out of
service needs evidence no tenant controls: Slurm's own view, or the node's kernel answering (or
not) the probe. A job that falls silent while it floods its node's slurmd gets itself restarted.

A slow but alive rank still beats (the beat comes from its own thread), so it is never a
suspect for long; a rank silent because its node is CPU-starved has a node that answers, so it
meets the hang timeout, not the node verdict. One decision per run: later silence of the same
run is the consequence of the first failure, not a second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from clusterd.liveness.health import Failure, NodeHealth
from clusterd.liveness.probe import NodeProber, Reach
from clusterd.liveness.progress import ProgressRules, hang_detail, odd_ranks, stalled_ranks, stragglers
from clusterd.liveness.table import LivenessTable, RankBeat, Run
from clusterd.model.causes import Cause
from clusterd.slurm.types import JobState, NodeState, SlurmNode

log = logging.getLogger(__name__)

_OK_EXITS = frozenset({0, 85})  # finished, or checkpointed and asked to be requeued (REQUEUE_EXIT_CODE)
_PROBE_GAP_SECONDS = 0.2  # between the two probes that confirm an unreachable node
_FORGET_AFTER_SECONDS = 120.0  # a run whose job Slurm no longer shows running is dropped after this
_LATE_CHECK_SECONDS = 1.0  # a check this much later than due follows a stalled loop: no verdict then


@dataclass(frozen=True)
class Detection:
    record_id: int
    job_id: str
    restart_count: int  # the run it concerns: a decision about an older run is void
    cause: Cause  # NODE_FAILURE, RANK_HUNG, RANK_FAILED, or STRAGGLER (an eviction to weigh)
    nodes: tuple[str, ...]  # the dead nodes (all of this run's found at once), or the failed rank's node
    ranks: tuple[int, ...]
    detected_by: str  # "heartbeat+probe", "heartbeat", "rank-exit"
    failed_at: float  # wall clock: the last sign of life of what failed
    detected_at: float
    detail: str
    exit_code: int = 0
    committed_step: int = -1  # the newest checkpoint step the run's ranks reported committed
    drain: tuple[str, ...] = ()  # of ``nodes``, those another user's job runs on: drained, not marked DOWN
    relaunch: int = 0  # the run's in-place relaunch (--spare-nodes) it concerns
    rank_nodes: tuple[str, ...] = ()  # the nodes the run's ranks beat from (their word: checked against Slurm)
    ratio: float = 0.0  # STRAGGLER: the node's step time over the others'
    redo: float = 0.0  # STRAGGLER: seconds of work since the run's newest checkpoint (done again after a restart)


def crashed_rank(run: Run) -> tuple[int, RankBeat] | None:
    """The first rank of a multi-rank run that reported exiting with a failure status, if any.

    A single rank's exit status is the job's own (Slurm's view and the exit-code policy decide);
    in a multi-rank job, one rank failing while its peers ran is a rank failure, and the peers'
    own exit (killed by srun, a collective timing out) is its consequence.
    """
    if run.world_size <= 1:
        return None
    for rank, beat in sorted(run.ranks.items()):
        if beat.exiting and beat.exit_code not in _OK_EXITS:
            return rank, beat
    return None


def crash_detail(rank: int, beat: RankBeat) -> str:
    return f"rank {rank} on {beat.node} exited with status {beat.exit_code}"


@dataclass(frozen=True)
class JobView:
    """What the detector needs of Slurm's view of one job."""

    state: JobState
    restart_count: int
    nodes: tuple[str, ...] = ()  # the run's allocation: beats naming another node are not believed
    user: str = ""
    cpus: int = 0  # the CPUs of the job's nodes (0: unknown): a bound on its ranks
    array_job_id: str = ""  # an array task's array


Act = Callable[[Detection], Awaitable[None]]
Beating = dict[str, dict[int, str]]  # node -> {record id: user} of the runs beating from it now


class Detector:
    def __init__(
        self,
        table: LivenessTable,
        prober: NodeProber,
        act: Act,
        *,
        jobs: Callable[[str], JobView | None],
        nodes: Callable[[], dict[str, SlurmNode]],
        others_on: Callable[[str, str], bool] = lambda node, user: False,
        suspect_after_intervals: float,
        check_every: float,
        default_port: int = 6818,
        progress: ProgressRules | None = None,
        straggling: Callable[[dict[str, float]], None] = lambda new: None,
        health: NodeHealth | None = None,
        drain: Callable[[str, str], Awaitable[bool]] | None = None,
        evict: bool = False,
    ) -> None:
        self._table = table
        self._prober = prober
        self._act = act
        self._jobs = jobs
        self._nodes = nodes
        self._others_on = others_on  # (node, user): whether a job of another user runs there
        self._last_check = 0.0
        self._suspect_after = suspect_after_intervals
        self._check_every = check_every
        self._default_port = default_port
        self._progress = progress or ProgressRules()
        self._straggling = straggling  # nodes a run newly names stragglers (node -> ratio)
        self.health = health or NodeHealth()
        self._drain = drain  # (node, reason) -> whether it was drained (None: scored, never drained)
        self._adopted = False  # Slurm's drained nodes were looked at for clusterd's own drains
        self._evict = evict  # weigh leaving a straggler out (the restarter decides: liveness.eviction)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.check_once()
            except Exception:
                log.exception("liveness check failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._check_every)

    async def check_once(self) -> list[Detection]:
        since = time.monotonic() - self._last_check
        try:
            if self._last_check and since > self._check_every + _LATE_CHECK_SECONDS:
                # The loop stalled: beats that arrived meanwhile may not be taken yet, so silence seen
                # now is clusterd's, not the ranks'. Decide on the next look.
                log.warning("liveness check %.1fs late; no verdict this round", since - self._check_every)
                return []
            return await self._check()
        finally:
            self._last_check = time.monotonic()

    async def _check(self) -> list[Detection]:
        found: list[Detection] = []
        nodes = self._nodes()
        self._back_in_service(nodes)
        beating = self._beating_nodes()
        for run in self._table.runs():
            view = self._jobs(run.job_id)
            if view is None or view.state.terminal:
                gone = run.gone_since = run.gone_since or time.monotonic()
                if time.monotonic() - gone > _FORGET_AFTER_SECONDS:
                    self._table.forget(run)
                continue
            run.gone_since = 0.0
            if run.decided or view.state != JobState.RUNNING or view.restart_count != run.restart_count:
                continue  # not running this run (yet, or any more): Slurm's own view decides
            detection = (
                await self._crashed(run, nodes, view, beating)
                or await self._silent(run, nodes, view, beating)
                or self._stalled(run, view)
            )
            if detection is None:
                for node in self._straggle(run, view):
                    await self._blame(Failure(node, run.record_id, run.job_id, view.user, "straggler", evidence=False))
                if self._evict:
                    await self._weigh_eviction(run, view)
            if detection is not None and detection.cause is Cause.NODE_FAILURE:
                drain = tuple(n for n in detection.nodes if self._others_on(n, view.user))
                detection = replace(detection, drain=drain)
            if detection is not None and not run.decided:
                detection = replace(
                    detection,
                    committed_step=run.committed_step(),
                    relaunch=run.relaunch,
                    rank_nodes=tuple(sorted({b.node for b in run.ranks.values()})),
                )
                run.decided = True
                found.append(detection)
                # The detail may carry a rank's stack (the job's text): one log line, whatever it holds.
                log.warning("job %s: %s (%s)", run.job_id, one_line(detection.detail), detection.detected_by)
                await self._act(detection)
                await self._score(detection, run, view)
        return found

    async def _crashed(
        self, run: Run, nodes: dict[str, SlurmNode], view: JobView, beating: Beating
    ) -> Detection | None:
        """A rank that reported a failed exit; a node failure instead when another node of the run is
        dead: a peer's death makes the survivors' collectives fail at once, before the dead node's
        silence is seen, and the node is what failed."""
        failed = crashed_rank(run)
        if failed is None:
            return None
        rank, beat = failed
        others = {b.node for b in run.ranks.values() if b.node in view.nodes and b.node != beat.node}
        dead = sorted(await self._unreachable(sorted(others), nodes, run, view.user, beating))
        if dead:
            ranks = sorted(r for r, b in run.ranks.items() if b.node in dead)
            return self._node_failure(run, dead, ranks, f"; {crash_detail(rank, beat)} as a consequence")
        return Detection(
            run.record_id,
            run.job_id,
            run.restart_count,
            Cause.RANK_FAILED,
            (beat.node,),
            (rank,),
            "rank-exit",
            beat.seen_wall,
            time.time(),
            crash_detail(rank, beat),
            exit_code=beat.exit_code,
        )

    def _beating_nodes(self) -> dict[str, dict[int, str]]:
        """Node -> the records (and their users) whose ranks beat from it within their last interval."""
        now = time.monotonic()
        beating: dict[str, dict[int, str]] = {}
        for run in self._table.runs():
            view = self._jobs(run.job_id)
            for beat in run.ranks.values():
                if view is not None and not beat.exiting and now - beat.seen <= run.interval * 1.5:
                    beating.setdefault(beat.node, {})[run.record_id] = view.user
        return beating

    async def _unreachable(
        self, names: list[str], nodes: dict[str, SlurmNode], run: Run, user: str, beating: Beating
    ) -> list[str]:
        """Those of ``names`` that are dead (probed together). Another job of the same user still
        beating from a node is evidence it lives: such a node is not probed. (Another user's beats
        are not taken: a tenant could name a node of its allocation it does not run on.)"""

        def vouched(node: str) -> bool:
            return any(r != run.record_id and u == user for r, u in beating.get(node, {}).items())

        alive = await asyncio.gather(*(_true() if vouched(n) else self._node_alive(nodes.get(n)) for n in names))
        return [n for n, ok in zip(names, alive, strict=True) if not ok]

    async def _silent(self, run: Run, nodes: dict[str, SlurmNode], view: JobView, beating: Beating) -> Detection | None:
        """Silent ranks -> a dead node (probed) or a hung rank. A beat is the job's word: only nodes
        of the job's own allocation are ever probed or declared dead on it."""
        now = time.monotonic()
        suspect = run.interval * self._suspect_after
        silent: dict[str, list[int]] = {}
        lagging: dict[str, list[int]] = {}  # missed a beat, not yet suspect
        for rank, beat in run.ranks.items():
            if beat.node not in view.nodes or beat.exiting:
                continue
            quiet = now - beat.seen
            if quiet > suspect:
                silent.setdefault(beat.node, []).append(rank)
            elif quiet > run.interval:
                lagging.setdefault(beat.node, []).append(rank)
        dead = await self._unreachable(list(silent), nodes, run, view.user, beating)
        if dead:
            # Nodes that died with it beat last up to one interval later, so they may still be short of
            # the suspect window: a node of the run that missed a beat is probed now, so that two
            # failures at once are one restart, not two.
            for node in await self._unreachable(
                [n for n in lagging if n not in silent], nodes, run, view.user, beating
            ):
                silent[node] = lagging[node]
                dead.append(node)
            dead.sort()
            return self._node_failure(run, dead, sorted(r for n in dead for r in silent[n]))
        for node, ranks in sorted(silent.items()):
            last = max(run.ranks[r].seen for r in ranks)
            last_wall = max(run.ranks[r].seen_wall for r in ranks)
            who = f"rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, sorted(ranks)))}"
            if now - last > run.hang_timeout:
                return Detection(
                    run.record_id,
                    run.job_id,
                    run.restart_count,
                    Cause.RANK_HUNG,
                    (node,),
                    tuple(ranks),
                    "heartbeat",
                    last_wall,
                    time.time(),
                    f"{who} on {node} silent {now - last:.1f}s (hang timeout {run.hang_timeout:g}s) "
                    "while the node answers",
                )
        return None

    def _stalled(self, run: Run, view: JobView) -> Detection | None:
        """Ranks that beat but stopped advancing: ask for their stacks, then RANK_HUNG once every
        beating rank sent one (or a few intervals passed)."""
        now = time.monotonic()
        beating = run.interval * self._suspect_after  # a silent rank is the silence check's to judge
        live = {
            r: b for r, b in run.ranks.items() if b.node in view.nodes and not b.exiting and now - b.seen <= beating
        }
        # Ranks holding for a stop signal wait for their peers, not advancing: that is no hang.
        stalled = [] if run.stop.under_way else stalled_ranks(live, self._progress, now)
        if not stalled:
            if run.stacks_asked:  # they moved on: a later stall asks anew
                run.stacks_asked, run.stacks_kept = 0.0, 0
                for beat in run.ranks.values():
                    beat.stack, beat.stack_sig = "", ""
            return None
        if not run.stacks_asked:
            run.stacks_asked = now
            log.info("job %s: ranks %s stopped advancing; asking for their stacks", run.job_id, _ranks_text(stalled))
            return None
        waited = now - run.stacks_asked
        if any(not b.stack_sig for b in live.values()) and waited < max(3 * run.interval, 2.0):
            return None
        named = odd_ranks(live, stalled)
        nodes = tuple(sorted({live[r].node for r in named}))
        worst = max(now - live[r].advanced for r in stalled)
        detail = hang_detail(live, stalled, named, worst)
        return Detection(
            run.record_id,
            run.job_id,
            run.restart_count,
            Cause.RANK_HUNG,
            nodes,
            tuple(named),
            "progress",
            time.time() - worst,
            time.time(),
            detail,
        )

    async def _score(self, det: Detection, run: Run, view: JobView) -> None:
        """Pin the failure on its node(s) for the scoring across jobs. A node death is clusterd's own
        evidence (its probe); a hang is the job's word, and pinned only when it names some of the
        run's nodes, not all (never the only node of a single-node run: its own deadlock looks the
        same); a crashed rank is never a node's fault."""
        if det.cause is Cause.NODE_FAILURE:
            for node in det.nodes:
                await self._blame(Failure(node, run.record_id, run.job_id, view.user, "node death", evidence=True))
        elif det.cause is Cause.RANK_HUNG:
            run_nodes = {b.node for b in run.ranks.values()}
            if det.nodes and set(det.nodes) < run_nodes:
                for node in det.nodes:
                    await self._blame(Failure(node, run.record_id, run.job_id, view.user, "hang", evidence=False))

    async def _blame(self, failure: Failure) -> None:
        verdict = self.health.blame(failure)
        if verdict is None:
            return
        node = failure.node
        if self._drain is None:  # scoring only: it asks again at the next failure
            log.warning(
                "node %s %s: would drain it (drain_failing_nodes is off): %s", node, verdict.reason, verdict.jobs
            )
            return
        log.warning("node %s %s: draining it: %s", node, verdict.reason, verdict.jobs)
        try:
            drained = await self._drain(node, verdict.reason)
        except Exception:
            log.exception("cannot drain node %s", node)
            return
        if drained:
            self.health.drained_for(node, verdict)

    def lead(self) -> None:
        """This replica leads from now on: Slurm's drained nodes are looked at again for clusterd's own
        drains (the old leader's are probed by this one)."""
        self._adopted = False

    def _back_in_service(self, nodes: dict[str, SlurmNode]) -> None:
        """A node clusterd drained that Slurm shows usable again was resumed by an operator: its past
        failures no longer count. At the first look (after each leadership gained, see :meth:`lead`),
        nodes Slurm shows drained by an earlier clusterd or another replica
        (its reason says so) are taken as drained by this one: they are probed and shown as such;
        nodes in service whose recalled failures called for a drain were returned since."""
        if nodes and not self._adopted:
            self._adopted = True
            for name, seen in sorted(nodes.items()):
                out = not seen.state.usable or "DRAIN" in seen.flags
                if out and self.health.adopt(name, seen.reason):
                    log.info("node %s was drained by clusterd before this start (%s)", name, seen.reason)
                elif not out:
                    self.health.settle(name)
        for name in self.health.drained():
            node = nodes.get(name)
            if node is None:
                continue
            out = not node.state.usable or "DRAIN" in node.flags
            if self.health.observe(name, out_of_service=out):
                log.info("node %s is back in service: its failure record starts anew", name)

    async def _weigh_eviction(self, run: Run, view: JobView) -> None:
        """Hand each straggler of the run to the restarter once, to leave it out when that pays. The
        run is not decided here: the restarter marks it so when it restarts the job."""
        for node, ratio in sorted(run.stragglers.items()):
            if node in run.eviction_asked or node not in view.nodes:
                continue
            run.eviction_asked.add(node)
            now = time.time()
            since = run.committed_at() or run.first_step_wall or run.began_wall
            ranks = tuple(sorted(r for r, b in run.ranks.items() if b.node == node))
            await self._act(
                Detection(
                    run.record_id,
                    run.job_id,
                    run.restart_count,
                    Cause.STRAGGLER,
                    (node,),
                    ranks,
                    "straggler",
                    now,
                    now,
                    f"node {node} ran {ratio:.2f}x the other nodes' step time",
                    committed_step=run.committed_step(),
                    relaunch=run.relaunch,
                    rank_nodes=tuple(sorted({b.node for b in run.ranks.values()})),
                    ratio=ratio,
                    redo=max(0.0, now - since),
                )
            )

    def _straggle(self, run: Run, view: JobView) -> list[str]:
        """The nodes newly named stragglers of the run."""
        found = stragglers({r: b for r, b in run.ranks.items() if b.node in view.nodes}, self._progress)
        new = {n: ratio for n, ratio in found.items() if n not in run.stragglers}
        run.stragglers = found
        for node, ratio in sorted(new.items()):
            log.warning("job %s: node %s is a straggler (%.2fx the other nodes' step time)", run.job_id, node, ratio)
        if new:
            self._straggling(new)
        return sorted(new)

    def _node_failure(self, run: Run, dead: list[str], ranks: list[int], more: str = "") -> Detection:
        """NODE_FAILURE of ``dead`` (probed), whose ``ranks`` went silent with them."""
        last = max(run.ranks[r].seen for r in ranks)
        who = f"rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))}"
        return Detection(
            run.record_id,
            run.job_id,
            run.restart_count,
            Cause.NODE_FAILURE,
            tuple(dead),
            tuple(ranks),
            "heartbeat+probe",
            max(run.ranks[r].seen_wall for r in ranks),
            time.time(),
            f"node{'s' if len(dead) > 1 else ''} {', '.join(dead)} unreachable: {who} silent "
            f"{time.monotonic() - last:.1f}s, node not answering{more}",
        )

    async def _node_alive(self, node: SlurmNode | None) -> bool:
        """Dead twice in a row (or DOWN in Slurm already) is dead; unknown nodes count as alive."""
        if node is None:
            return True
        if node.state == NodeState.DOWN:
            return False
        if not node.address:
            return True  # no address to probe: leave the verdict to Slurm
        port = node.port or self._default_port
        first = await self._prober.probe(node.address, port)
        if not first.dead:
            if first is Reach.BUSY:
                log.info("node %s: slurmd's port does not answer but the host does; not a dead node", node.name)
            return True
        await asyncio.sleep(_PROBE_GAP_SECONDS)
        return not (await self._prober.probe(node.address, port)).dead


def one_line(text: str) -> str:
    """``text`` on one log line: a newline in what a job sent cannot start a forged line."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _ranks_text(ranks: list[int]) -> str:
    return ",".join(map(str, ranks[:16])) + (f" (+{len(ranks) - 16})" if len(ranks) > 16 else "")


async def _true() -> bool:
    return True
