"""Parsers against unedited Slurm 22.05 output captured on the local stack (tests/fixtures/slurm)."""

from __future__ import annotations

import pytest

from clusterd.errors import says_unavailable
from clusterd.slurm.argv import parse_sbatch_parsable
from clusterd.slurm.parse import (
    SlurmParseError,
    gres_gpus,
    job_state,
    node_state,
    parse_partitions,
    parse_sinfo,
    parse_squeue,
    parse_version,
)
from clusterd.slurm.types import JobState, NodeState
from clusterd.topology import parse_topology
from tests.support.paths import SLURM_FIXTURES


def fixture(name: str) -> str:
    return (SLURM_FIXTURES / name).read_text()


def test_squeue_states_exit_codes_and_nodes() -> None:
    jobs = {j.job_id: j for j in parse_squeue(fixture("squeue_running_pending_finished.json"))}
    assert jobs["23"].state == JobState.RUNNING and jobs["23"].nodes == ("node1",) and jobs["23"].user == "alice"
    assert jobs["24"].nodes == ("node2", "node3")
    assert jobs["26"].state == JobState.FAILED and (jobs["26"].exit_code, jobs["26"].reason) == (3, "NonZeroExitCode")
    assert jobs["27"].state == JobState.CANCELLED and jobs["27"].exit_signal == 15
    assert jobs["28"].state == JobState.PENDING and jobs["28"].reason == "Resources" and jobs["28"].nodes == ()
    assert jobs["25"].reason == ""  # Slurm's "None" is no reason
    assert jobs["23"].submit_time and jobs["23"].start_time and jobs["23"].requeue  # JobRequeue=1


def test_squeue_after_a_node_died_shows_slurms_own_requeue() -> None:
    jobs = {j.job_id: j for j in parse_squeue(fixture("squeue_after_node_kill_requeued.json"))}
    assert (jobs["32"].state, jobs["32"].reason, jobs["32"].restart_count) == (JobState.PENDING, "BeginTime", 1)
    again = {j.job_id: j for j in parse_squeue(fixture("squeue_requeued_running_again.json"))}
    assert again["32"].state == JobState.RUNNING and again["32"].restart_count == 1


def test_sinfo_gpus_and_down_nodes() -> None:
    nodes = {n.name: n for n in parse_sinfo(fixture("sinfo_mixed.json"))}
    assert (nodes["node1"].state, nodes["node1"].gpus_allocated, nodes["node1"].gpus_total) == (NodeState.MIXED, 2, 4)
    assert nodes["node1"].partitions == ("debug", "batch")
    down = {n.name: n for n in parse_sinfo(fixture("sinfo_node_down.json"))}
    assert down["node4"].state == NodeState.DOWN and down["node4"].reason == "Not responding"
    idle = parse_sinfo(fixture("sinfo_all_idle.json"))
    assert [n.name for n in idle] == [f"node{i}" for i in range(1, 7)]
    assert {n.state for n in idle} == {NodeState.IDLE} and {n.gpus_allocated for n in idle} == {0}


def test_topology_capture() -> None:
    switches = {s.name: s for s in parse_topology(fixture("scontrol_show_topology.txt"))}
    assert switches["leaf1"].nodes == ("node1", "node2", "node3")
    assert switches["spine"].switches == ("leaf1", "leaf2")


def test_small_outputs() -> None:
    assert parse_sbatch_parsable(fixture("sbatch_parsable_stdout.txt")).isdigit()
    assert parse_version(fixture("sbatch_version.txt")) == "22.05.8"
    assert parse_partitions(fixture("scontrol_show_partition_oneliner.txt")) == ["debug", "batch"]
    with pytest.raises(ValueError):
        parse_sbatch_parsable("sbatch: error: Batch job submission failed\n")
    with pytest.raises(ValueError, match="Submitted batch job"):  # why the service always passes --parsable
        parse_sbatch_parsable(fixture("sbatch_stdout.txt"))


@pytest.mark.parametrize("name", ["sbatch_error_bad_partition.stderr", "sbatch_error_gres_too_many.stderr"])
def test_sbatch_refusals_are_not_an_outage(name: str) -> None:
    """A refused submission is the caller's error (relayed as is), never SlurmUnavailable (retried)."""
    text = fixture(name)
    assert "Batch job submission failed" in text and not says_unavailable(text)


@pytest.mark.parametrize(
    ("base", "flags", "state"),
    [
        ("idle", [], NodeState.IDLE),
        ("mixed", ["DRAIN"], NodeState.DRAINING),
        ("idle", ["DRAIN"], NodeState.DRAINED),
        ("down", [], NodeState.DOWN),
        ("idle", ["NOT_RESPONDING"], NodeState.IDLE),
        ("weird", [], NodeState.UNKNOWN),
    ],
)
def test_node_states(base: str, flags: list[str], state: NodeState) -> None:
    assert node_state(base, flags) == state


def test_newer_api_shapes_are_understood() -> None:
    """26.05-style job_state lists and {set, infinite, number} numbers (documented shapes)."""
    text = (
        '{"jobs": [{"job_id": 5, "job_state": ["RUNNING", "COMPLETING"], "restart_cnt": {"set": true, '
        '"infinite": false, "number": 2}, "exit_code": {"return_code": {"set": true, "number": 4}}, '
        '"nodes": "n[1-2]"}], "errors": []}'
    )
    (job,) = parse_squeue(text)
    assert (job.state, job.restart_count, job.exit_code, job.nodes) == (JobState.RUNNING, 2, 4, ("n1", "n2"))
    assert job_state("bogus") == JobState.UNKNOWN
    assert gres_gpus("gpu:a100:4(S:0),gpu:2") == 6


@pytest.mark.parametrize("text", ["not json", "[]", '{"errors": [{"error": "boom"}], "jobs": []}'])
def test_bad_json_is_a_clear_error(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_squeue(text)
