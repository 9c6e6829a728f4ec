"""Restart policy: classify how a job ended and decide whether to bring it back (pure functions).

Kept free of I/O so every rule is unit-tested against records and Slurm states; restarts.py acts
on the decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TypeVar

from clusterd.config import RestartDefaults
from clusterd.model.causes import Cause
from clusterd.model.spec import RestartPolicy
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.store.records import JobRecord, RestartEntry

# Exit codes shared with the client library (clusterctl.slurm_env): 85 = "checkpointed, requeue me",
# 86 = "do not requeue me" (fatal by default, see RestartDefaults.fatal_exit_codes).
REQUEUE_EXIT_CODE = 85
# A run this short, killed (SIGTERM/SIGKILL) on a node the last restart declared failed, was hit by
# Slurm's kill for the lost run: queued while the node was unreachable, delivered when it came back
# to the new run of the same job id (requeues keep it). Seconds; Slurm's times have 1 s resolution.
STALE_KILL_SECONDS = 5.0
_KILL_EXITS = frozenset({128 + 9, 128 + 15})
_KILL_SIGNALS = frozenset({9, 15})
T = TypeVar("T")


@dataclass(frozen=True)
class Policy:
    max_restarts: int
    on_node_failure: bool
    on_preemption: bool
    on_time_limit: bool
    retryable_exit_codes: frozenset[int]
    fatal_exit_codes: frozenset[int]
    backoff_seconds: float
    exclude_failed_nodes: bool
    no_progress_limit: int
    on_rank_failure: bool = True


def effective_policy(spec: RestartPolicy, defaults: RestartDefaults) -> Policy:
    """Job-level fields over the service's defaults; unset optional fields keep the default."""

    return Policy(
        max_restarts=_or(spec.max_restarts, defaults.max_restarts),
        on_node_failure=_or(spec.on_node_failure, defaults.on_node_failure),
        on_preemption=_or(spec.on_preemption, defaults.on_preemption),
        on_time_limit=_or(spec.on_time_limit, defaults.on_time_limit),
        retryable_exit_codes=frozenset(spec.retryable_exit_codes or defaults.retryable_exit_codes),
        fatal_exit_codes=frozenset(spec.fatal_exit_codes) | frozenset(defaults.fatal_exit_codes),
        backoff_seconds=_or(spec.backoff_seconds, defaults.backoff_seconds),
        exclude_failed_nodes=_or(spec.exclude_failed_nodes, defaults.exclude_failed_nodes),
        no_progress_limit=_or(spec.no_progress_limit, defaults.no_progress_limit),
        on_rank_failure=_or(spec.on_rank_failure, defaults.on_rank_failure),
    )


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


@dataclass(frozen=True)
class Termination:
    cause: Cause
    failed_nodes: tuple[str, ...] = ()
    exit_code: int = 0
    detail: str = ""
    slurm_requeued: bool = False  # Slurm already put the job back to PENDING by itself
    nodes: tuple[str, ...] = ()  # the nodes of the run that ended, as last seen running
    detected_by: str = "slurm"  # "slurm": from Slurm's view; "rank-exit": a rank's own exit report


def classify(rec: JobRecord, before_nodes: tuple[str, ...], sj: SlurmJob, down: frozenset[str]) -> Termination | None:
    """How the job's last run ended, or None while it has not ended.

    ``rec.acked_restarts`` is the Slurm restart count the service has already accounted for: a
    higher count on a live job means Slurm requeued it on its own (node failure, preemption).
    """
    term = _classify(rec, before_nodes, sj, down)
    return None if term is None else replace(term, nodes=before_nodes)


def _classify(rec: JobRecord, before_nodes: tuple[str, ...], sj: SlurmJob, down: frozenset[str]) -> Termination | None:
    failed = tuple(n for n in before_nodes if n in down)
    if not sj.state.terminal:
        if sj.restart_count > rec.acked_restarts:
            if failed or not before_nodes:
                return Termination(Cause.NODE_FAILURE, failed, detail=_nodes_text(failed), slurm_requeued=True)
            return Termination(Cause.PREEMPTED, detail="requeued by Slurm", slurm_requeued=True)
        return None
    if sj.restart_count < rec.acked_restarts:
        return None  # our own requeue has not shown up in Slurm yet
    state = sj.state
    if state == JobState.COMPLETED:
        return Termination(Cause.COMPLETED)
    if state == JobState.CANCELLED:
        return Termination(Cause.CANCELLED, detail="cancelled")
    if state in (JobState.NODE_FAIL, JobState.BOOT_FAIL):
        return Termination(Cause.NODE_FAILURE, failed, detail=_nodes_text(failed))
    if state == JobState.PREEMPTED:
        return Termination(Cause.PREEMPTED, detail="preempted")
    if state in (JobState.TIMEOUT, JobState.DEADLINE):
        return Termination(Cause.TIME_LIMIT, detail="time limit reached")
    if state == JobState.OUT_OF_MEMORY:
        return Termination(Cause.OUT_OF_MEMORY, detail="out of memory")
    if failed:
        return Termination(Cause.NODE_FAILURE, failed, sj.exit_code, detail=_nodes_text(failed))
    if stale := _stale_kill(rec, before_nodes, sj):
        # The failure already restarted, not a new one: no failed nodes, so node health and the MTBF
        # count it once.
        where = ", ".join(stale)
        detail = f"killed as it started on {where}, back from the last failure: Slurm's kill for the lost run"
        return Termination(Cause.NODE_FAILURE, exit_code=sj.exit_code, detail=detail)
    if sj.exit_code == REQUEUE_EXIT_CODE:
        return Termination(
            Cause.REQUEUE_REQUESTED,
            exit_code=sj.exit_code,
            detail=f"exit {REQUEUE_EXIT_CODE}: checkpointed and asked to be requeued",
        )
    detail = f"signal {sj.exit_signal}" if sj.exit_signal else f"exit code {sj.exit_code}"
    return Termination(Cause.EXIT_CODE, exit_code=sj.exit_code, detail=detail)


def _stale_kill(rec: JobRecord, before_nodes: tuple[str, ...], sj: SlurmJob) -> tuple[str, ...]:
    """The nodes of the last node-failure restart that a killed run, begun after it and ended within
    ``STALE_KILL_SECONDS``, ran on; () when the run's end is its own."""
    if not rec.restarts or not (sj.exit_code in _KILL_EXITS or sj.exit_signal in _KILL_SIGNALS):
        return ()
    last = rec.restarts[-1]
    if last.cause != Cause.NODE_FAILURE or sj.start_time is None or sj.end_time is None:
        return ()
    if sj.start_time < math.floor(last.time) or sj.end_time - sj.start_time > STALE_KILL_SECONDS:
        return ()
    ran_on = set(sj.nodes or before_nodes)
    return tuple(n for n in last.failed_nodes if n in ran_on)


def _nodes_text(nodes: tuple[str, ...]) -> str:
    return f"node failure on {', '.join(nodes)}" if nodes else "node failure"


@dataclass(frozen=True)
class Decision:
    requeue: bool
    reason: str  # the final reason when not requeued; the restart's detail otherwise
    final_cause: Cause | None = None


def stalled_restarts(restarts: list[RestartEntry], current_step: int) -> int:
    """How many of the latest automatic restarts produced no newer committed step than now."""
    count = 0
    for entry in reversed(restarts):
        if entry.cause == Cause.MANUAL_REQUEUE:
            continue
        if entry.checkpoint_step < current_step:
            break
        count += 1
    return count


def step_at_start(restarts: list[RestartEntry]) -> int:
    """The newest committed step when the current run began (-1: none): the last restart's step."""
    return restarts[-1].checkpoint_step if restarts else -1


def decide(term: Termination, policy: Policy, rec: JobRecord, current_step: int) -> Decision:
    """Requeue or stop, with a reason a user can act on.

    A run that hit its time limit comes back only when it committed a newer checkpoint than it
    started from: anything else would start it again from scratch, which sbatch never does. A job
    that exits 85 asked to be requeued (it checkpointed first), so only the budgets stop it.
    """
    if rec.user_cancelled or term.cause == Cause.CANCELLED:
        return Decision(False, "cancelled by the user", Cause.CANCELLED)
    if term.cause == Cause.COMPLETED:
        return Decision(False, "completed", Cause.COMPLETED)
    if term.cause == Cause.OUT_OF_MEMORY:
        return Decision(False, "out of memory: not requeued (raise --mem)", Cause.OUT_OF_MEMORY)
    if term.exit_code in policy.fatal_exit_codes:
        return Decision(False, f"exit code {term.exit_code} is fatal: not requeued", Cause.EXIT_CODE)
    allowed = {
        Cause.NODE_FAILURE: policy.on_node_failure,
        Cause.PREEMPTED: policy.on_preemption,
        Cause.TIME_LIMIT: policy.on_time_limit,
        Cause.EXIT_CODE: term.exit_code in policy.retryable_exit_codes,
        Cause.REQUEUE_REQUESTED: True,
        Cause.RANK_HUNG: policy.on_rank_failure,
        Cause.RANK_FAILED: policy.on_rank_failure,
        Cause.STRAGGLER: True,  # the service's evict_stragglers decided it pays
    }.get(term.cause, False)
    if allowed and term.cause == Cause.TIME_LIMIT and current_step <= step_at_start(rec.restarts):
        return Decision(
            False, f"{term.detail} with no new checkpoint: not requeued (it would start over)", Cause.TIME_LIMIT
        )
    if not allowed:
        return Decision(False, f"{term.detail or term.cause.value.lower()}: not requeued by policy", term.cause)
    automatic = [r for r in rec.restarts if r.cause != Cause.MANUAL_REQUEUE]
    if len(automatic) >= policy.max_restarts:
        return Decision(
            False, f"{term.detail}; restart budget spent ({policy.max_restarts} restarts)", Cause.RESTARTS_EXHAUSTED
        )
    if policy.no_progress_limit and stalled_restarts(rec.restarts, current_step) >= policy.no_progress_limit:
        step = "no checkpoint" if current_step < 0 else f"step {current_step}"
        return Decision(
            False,
            f"{term.detail}; {policy.no_progress_limit} restarts made no checkpoint progress (still at {step})",
            Cause.NO_PROGRESS,
        )
    return Decision(True, term.detail or term.cause.value.lower())


def resumed(entry: RestartEntry, nodes: int) -> RestartEntry:
    """``entry`` once the run after it started on ``nodes`` nodes.

    A ``-N MIN-MAX`` job that lost a node for good runs again on fewer (its checkpoint is
    resharded to the new world size); the detail says so, so users see why throughput changed.
    """
    if entry.nodes_before and nodes != entry.nodes_before:
        change = f"resumed on {nodes} node{'s' if nodes != 1 else ''} (was {entry.nodes_before})"
        detail = f"{entry.detail}; {change}" if entry.detail else change
        return replace(entry, nodes_after=nodes, detail=detail)
    return replace(entry, nodes_after=nodes)
