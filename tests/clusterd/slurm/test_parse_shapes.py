"""Both JSON families parse to the same values: 22.05 captures vs 26.05 fixtures built from the
documented data_parser/v0.0.45 schemas (see tests/fixtures/slurm/README.md; no 26.05 runs here)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clusterd.slurm.parse import (
    SlurmParseError,
    job_state,
    parse_sinfo,
    parse_sinfo_data,
    parse_squeue,
    parse_squeue_data,
)
from clusterd.slurm.types import JobState, NodeState, SlurmNode
from tests.support.paths import SLURM_FIXTURES


def text(name: str) -> str:
    return (SLURM_FIXTURES / name).read_text()


def jobs(name: str) -> dict[str, object]:
    return {j.job_id: j for j in parse_squeue(text(name))}


@pytest.mark.parametrize(
    ("job_id", "capture"),
    [
        ("24", "squeue_running_pending_finished.json"),  # RUNNING on node[2-3], gpu:4 each
        ("26", "squeue_running_pending_finished.json"),  # FAILED, exit 3
        ("27", "squeue_running_pending_finished.json"),  # CANCELLED, signal 15
        ("28", "squeue_running_pending_finished.json"),  # PENDING Resources
        ("32", "squeue_after_node_kill_requeued.json"),  # PENDING BeginTime after a node died, restart 1
    ],
)
def test_documented_26_05_jobs_equal_their_22_05_captures(job_id: str, capture: str) -> None:
    assert jobs("squeue_26.05_documented_jobs.json")[job_id] == jobs(capture)[job_id]


def test_documented_26_05_job_values() -> None:
    new = jobs("squeue_26.05_documented_jobs.json")
    running, failed, cancelled, requeued = new["24"], new["26"], new["27"], new["32"]
    assert (running.state, running.nodes, running.batch_host) == (JobState.RUNNING, ("node2", "node3"), "node2")  # type: ignore[attr-defined]
    assert (failed.state, failed.exit_code, failed.exit_signal) == (JobState.FAILED, 3, 0)  # type: ignore[attr-defined]
    assert (cancelled.exit_code, cancelled.exit_signal) == (0, 15)  # type: ignore[attr-defined]
    # ["PENDING", "REQUEUED"]: the base state wins over the flag
    assert (requeued.state, requeued.reason, requeued.restart_count) == (JobState.PENDING, "BeginTime", 1)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("documented", "capture"),
    [
        ("sinfo_26.05_documented_mixed.json", "sinfo_mixed.json"),
        ("sinfo_26.05_documented_node_down.json", "sinfo_node_down.json"),
        ("sinfo_26.05_documented_node_drained.json", "sinfo_node_drained.json"),
        ("restd_nodes_26.05_documented_node_down.json", "sinfo_node_down.json"),
    ],
)
def test_documented_26_05_nodes_equal_their_22_05_captures(documented: str, capture: str) -> None:
    # Where slurmd listens is per node; 26.05's grouped sinfo has no per-node address to compare.
    def located_nowhere(nodes: list[SlurmNode]) -> list[SlurmNode]:
        return [replace(n, address="", port=0, slurmd_started=0.0) for n in nodes]

    assert located_nowhere(parse_sinfo(text(documented))) == located_nowhere(parse_sinfo(text(capture)))


def test_grouped_sinfo_merges_partitions_and_spreads_group_figures() -> None:
    nodes = {n.name: n for n in parse_sinfo(text("sinfo_26.05_documented_mixed.json"))}
    assert len(nodes) == 6  # each node appears once per partition in the file
    assert nodes["node1"].partitions == ("debug", "batch")
    assert (nodes["node1"].state, nodes["node1"].gpus_allocated, nodes["node1"].gpus_total) == (NodeState.MIXED, 2, 4)
    # node[2-3] share one group: 2 CPUs / 512 MB allocated in total -> 1 CPU / 256 MB each
    assert (nodes["node3"].cpus_allocated, nodes["node3"].memory_mb_allocated, nodes["node3"].cpus_total) == (1, 256, 4)
    down = {n.name: n for n in parse_sinfo(text("sinfo_26.05_documented_node_down.json"))}
    assert (down["node4"].state, down["node4"].flags, down["node4"].reason) == (
        NodeState.DOWN,
        ("NOT_RESPONDING",),
        "Not responding",
    )
    drained = {n.name: n for n in parse_sinfo(text("sinfo_26.05_documented_node_drained.json"))}
    assert drained["node6"].state == NodeState.DRAINED and drained["node6"].reason.startswith("clusterctl")


def test_infinite_and_unset_numbers() -> None:
    unset = {"set": False, "infinite": False, "number": 7}
    data = {
        "jobs": [
            {
                "job_id": 9,
                "job_state": ["RUNNING"],
                "end_time": {"set": False, "infinite": True, "number": 0},
                "start_time": unset,
                "submit_time": {"set": True, "infinite": False, "number": 0},
                "restart_cnt": unset,
                "exit_code": {"status": ["PENDING"], "return_code": unset, "signal": {"id": unset}},
            }
        ],
        "meta": {"plugin": {"data_parser": "data_parser/v0.0.45"}},
    }
    (job,) = parse_squeue_data(data)
    assert (job.end_time, job.start_time, job.submit_time) == (None, None, None)
    assert (job.restart_count, job.exit_code, job.exit_signal) == (0, 0, 0)


def test_flat_new_node_record_with_list_features() -> None:
    node = {
        "name": "n1",
        "state": ["ALLOCATED", "DRAIN"],
        "cpus": 8,
        "alloc_cpus": 8,
        "gres": "gpu:a100:8",
        "features": ["a100", "ib"],
        "active_features": ["a100"],
        "partitions": ["gpu"],
    }
    (n,) = parse_sinfo_data({"nodes": [node]})
    assert (n.state, n.features, n.partitions, n.gpus_total) == (NodeState.DRAINING, ("a100",), ("gpu",), 8)


def test_job_state_prefers_base_state_in_any_order() -> None:
    assert job_state(["REQUEUED", "PENDING"]) == JobState.PENDING
    assert job_state(["COMPLETING"]) == JobState.COMPLETING
    assert job_state([]) == JobState.UNKNOWN


@pytest.mark.parametrize("data", [{"sinfo": ["not an object"]}, {"nodes": [{"state": "idle"}]}, {"nodes": 3}])
def test_malformed_records_are_parse_errors(data: dict[str, object]) -> None:
    with pytest.raises(SlurmParseError):
        parse_sinfo_data(data)
    with pytest.raises(SlurmParseError):
        parse_squeue_data({"jobs": [{"name": "no id"}]})
