"""The restart policy (supervisor/policy.py): pure functions over records and Slurm's view."""

from __future__ import annotations

import pytest

from clusterctl.v1 import jobs_pb2
from clusterd.config import RestartDefaults
from clusterd.model.spec import JobSpec, RestartPolicy
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.store.records import JobRecord, Phase, RestartEntry
from clusterd.supervisor.policy import (
    Cause,
    Termination,
    classify,
    decide,
    effective_policy,
    stalled_restarts,
    step_at_start,
)

DEFAULTS = effective_policy(RestartPolicy(), RestartDefaults())


def record(*restarts: RestartEntry, cancelled: bool = False) -> JobRecord:
    rec = JobRecord(1, "alice", "", JobSpec(command=["x"]), Phase.SUBMITTED, 0.0, job_id="9")
    rec.restarts = list(restarts)
    rec.user_cancelled = cancelled
    return rec


def ended(state: JobState, exit_code: int = 0, **kw: object) -> SlurmJob:
    return SlurmJob("9", "x", "alice", state, exit_code=exit_code, **kw)  # type: ignore[arg-type]


def restart(cause: str, step: int) -> RestartEntry:
    return RestartEntry(cause, (), 0.0, step)


def test_exit_85_is_a_requested_requeue_not_a_time_limit() -> None:
    term = classify(record(), ("node1",), ended(JobState.FAILED, 85), frozenset())
    assert term is not None and term.cause is Cause.REQUEUE_REQUESTED and term.exit_code == 85
    assert "checkpointed and asked to be requeued" in term.detail
    # It is a TerminationCause the API can carry.
    assert jobs_pb2.TerminationCause.Value(f"TERMINATION_CAUSE_{term.cause.value}")


def test_exit_85_is_requeued_even_with_on_time_limit_off() -> None:
    policy = effective_policy(RestartPolicy(on_time_limit=False), RestartDefaults())
    term = Termination(Cause.REQUEUE_REQUESTED, exit_code=85, detail="exit 85")
    assert decide(term, policy, record(), current_step=-1).requeue


@pytest.mark.parametrize("state", [JobState.TIMEOUT, JobState.DEADLINE])
def test_time_limit_without_a_checkpoint_is_not_started_over(state: JobState) -> None:
    term = classify(record(), ("node1",), ended(state), frozenset())
    assert term is not None and term.cause is Cause.TIME_LIMIT
    decision = decide(term, DEFAULTS, record(), current_step=-1)
    assert not decision.requeue and decision.final_cause is Cause.TIME_LIMIT
    assert "no new checkpoint" in decision.reason


def test_time_limit_after_progress_is_requeued_and_only_while_progress_continues() -> None:
    term = Termination(Cause.TIME_LIMIT, detail="time limit reached")
    assert decide(term, DEFAULTS, record(), current_step=0).requeue  # first run committed step 0
    after = record(restart("TIME_LIMIT", 40))
    assert decide(term, DEFAULTS, after, current_step=80).requeue
    assert not decide(term, DEFAULTS, after, current_step=40).requeue  # the second run got nowhere
    off = effective_policy(RestartPolicy(on_time_limit=False), RestartDefaults())
    assert not decide(term, off, record(), current_step=10).requeue


def test_step_at_start_is_the_last_restarts_step() -> None:
    assert step_at_start([]) == -1
    assert step_at_start([restart("NODE_FAILURE", 3), restart("MANUAL_REQUEUE", 5)]) == 5


def test_classify_slurms_own_requeue_and_our_pending_requeue() -> None:
    rec = record()
    live = ended(JobState.PENDING, restart_count=1)
    node = classify(rec, ("node1", "node2"), live, frozenset({"node2"}))
    assert node is not None and node.cause is Cause.NODE_FAILURE and node.failed_nodes == ("node2",)
    assert node.slurm_requeued
    preempted = classify(rec, ("node1",), live, frozenset())
    assert preempted is not None and preempted.cause is Cause.PREEMPTED
    assert classify(rec, ("node1",), ended(JobState.RUNNING), frozenset()) is None
    rec.acked_restarts = 2
    assert classify(rec, (), ended(JobState.FAILED, 1, restart_count=1), frozenset()) is None


def test_final_outcomes_and_fatal_codes() -> None:
    assert decide(Termination(Cause.COMPLETED), DEFAULTS, record(), -1).final_cause is Cause.COMPLETED
    assert not decide(Termination(Cause.NODE_FAILURE), DEFAULTS, record(cancelled=True), -1).requeue
    assert not decide(Termination(Cause.OUT_OF_MEMORY), DEFAULTS, record(), -1).requeue
    fatal = decide(Termination(Cause.EXIT_CODE, exit_code=86), DEFAULTS, record(), -1)
    assert not fatal.requeue and "86 is fatal" in fatal.reason
    assert not decide(Termination(Cause.EXIT_CODE, exit_code=1), DEFAULTS, record(), -1).requeue
    retry = effective_policy(RestartPolicy(retryable_exit_codes=[1]), RestartDefaults())
    assert decide(Termination(Cause.EXIT_CODE, exit_code=1), retry, record(), -1).requeue


def test_budgets_stop_a_loop() -> None:
    term = Termination(Cause.NODE_FAILURE, detail="node failure")
    spent = record(*[restart("NODE_FAILURE", s) for s in range(3)])
    decision = decide(term, DEFAULTS, spent, current_step=10)
    assert decision.final_cause is Cause.RESTARTS_EXHAUSTED
    stuck = record(restart("NODE_FAILURE", 5), restart("MANUAL_REQUEUE", 5), restart("NODE_FAILURE", 5))
    policy = effective_policy(RestartPolicy(no_progress_limit=2, max_restarts=10), RestartDefaults())
    assert stalled_restarts(stuck.restarts, 5) == 2  # manual requeues are not counted
    assert decide(term, policy, stuck, current_step=5).final_cause is Cause.NO_PROGRESS
    assert decide(term, policy, stuck, current_step=6).requeue


def test_job_fields_override_the_service_defaults() -> None:
    spec = RestartPolicy(max_restarts=7, fatal_exit_codes=[3], on_preemption=False, backoff_seconds=2)
    policy = effective_policy(spec, RestartDefaults())
    assert policy.max_restarts == 7 and not policy.on_preemption and policy.on_node_failure
    assert policy.fatal_exit_codes == {3, 86} and policy.backoff_seconds == 2.0


@pytest.mark.parametrize("code", [{"exit_code": 143}, {"exit_code": 137}, {"exit_signal": 9}])
def test_a_run_killed_as_it_starts_on_the_node_that_just_failed_is_that_failure(code: dict[str, int]) -> None:
    """Slurm's kill for the run lost on node2 waits for node2 to answer again, then lands on the new
    run of the same job id that Slurm just placed there: the failure's tail, not a crash."""
    rec = record(RestartEntry(Cause.NODE_FAILURE, ("node2",), 1000.4, 50))
    stale = ended(JobState.FAILED, nodes=("node2",), start_time=1010.0, end_time=1010.0, **code)
    term = classify(rec, ("node2",), stale, frozenset())
    assert term is not None and term.cause is Cause.NODE_FAILURE and "on node2" in term.detail
    assert not term.failed_nodes  # the failure already restarted, not a second one
    assert decide(term, DEFAULTS, rec, current_step=50).requeue


@pytest.mark.parametrize(
    "change",
    [
        {"end_time": 1060.0},  # it ran a minute: its own end
        {"nodes": ("node5",)},  # not on the node that failed
        {"exit_code": 1},  # not killed
        {"start_time": 990.0, "end_time": 990.0},  # began before the restart
    ],
)
def test_other_ends_after_a_node_failure_stay_their_own(change: dict[str, object]) -> None:
    rec = record(RestartEntry(Cause.NODE_FAILURE, ("node2",), 1000.4, 50))
    fields: dict[str, object] = {"nodes": ("node2",), "start_time": 1010.0, "end_time": 1010.0, "exit_code": 143}
    fields.update(change)
    term = classify(rec, (), ended(JobState.FAILED, **fields), frozenset())
    assert term is not None and term.cause is Cause.EXIT_CODE
