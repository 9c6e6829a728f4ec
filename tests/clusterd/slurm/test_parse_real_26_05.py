"""The parsers against real Slurm 26.05.5 output (tests/fixtures/slurm/README.md, "Captured real Slurm
24.11 and 26.05 output"): data_parser v0.0.45 shapes as the release prints them, not as documented."""

from __future__ import annotations

from clusterd.slurm.parse import parse_jobs_since, parse_sinfo, parse_squeue
from clusterd.slurm.types import JobState, NodeState
from tests.support.paths import SLURM_FIXTURES


def test_squeue_jobs_of_every_state() -> None:
    jobs = {j.job_id: j for j in parse_squeue((SLURM_FIXTURES / "squeue_26.05_real.json").read_text())}
    gpu2, held, ok, fail3, cancelled = (jobs[i] for i in ("127", "128", "129", "130", "131"))
    assert (gpu2.state, gpu2.nodes, gpu2.user, gpu2.batch_host) == (
        JobState.RUNNING,
        ("node1", "node2"),
        "alice",
        "node1",
    )
    assert gpu2.requeue and gpu2.start_time and gpu2.submit_time and gpu2.restart_count == 0
    assert (held.state, held.reason) == (JobState.PENDING, "JobHeldUser")
    assert (ok.state, ok.exit_code) == (JobState.COMPLETED, 0)
    assert (fail3.state, fail3.reason, fail3.exit_code) == (JobState.FAILED, "NonZeroExitCode", 3)
    assert cancelled.state is JobState.CANCELLED


def test_squeue_array_tasks_and_pending_remainder() -> None:
    jobs = [j for j in parse_squeue((SLURM_FIXTURES / "squeue_26.05_real.json").read_text()) if j.array_job_id == "132"]
    running = {j.array_task_id: j for j in jobs if j.state is JobState.RUNNING}
    assert {t: j.job_id for t, j in running.items()} == {0: "133", 1: "134"}
    (pending,) = [j for j in jobs if j.state is JobState.PENDING]
    assert (pending.job_id, pending.array_task_id, pending.array_pending) == ("132", None, "2-3%2")
    assert pending.reason == "JobArrayTaskLimit"


def test_sinfo_allocations() -> None:
    nodes = {n.name: n for n in parse_sinfo((SLURM_FIXTURES / "sinfo_26.05_real.json").read_text())}
    assert sorted(nodes) == [f"node{i}" for i in range(1, 7)]
    for name in ("node1", "node2"):
        n = nodes[name]
        assert (n.state, n.gpus_allocated, n.cpus_allocated, n.gpus_total) == (NodeState.MIXED, 2, 2, 4)
    assert all(nodes[f"node{i}"].state is NodeState.IDLE for i in range(3, 7))
    assert all(n.partitions == ("debug", "batch") and n.memory_mb_total == 2048 for n in nodes.values())


def test_the_partial_looks_filters_hold_with_json() -> None:
    """clusterd's partial look (argv.SQUEUE_NOT_PENDING_ARGV, squeue_jobs_argv) as 26.05 printed it
    while bob's held jobs 1222-1224 were PENDING: the state and id filters are honoured."""
    running = parse_squeue((SLURM_FIXTURES / "squeue_26.05_real_not_pending.json").read_text())
    assert [(j.job_id, j.state, j.user) for j in running] == [("1225", JobState.RUNNING, "alice")]
    (focus,) = parse_squeue((SLURM_FIXTURES / "squeue_26.05_real_focus.json").read_text())
    assert (focus.job_id, focus.state, focus.reason) == ("1224", JobState.PENDING, "JobHeldUser")


def test_restd_no_job_changes_is_no_change() -> None:
    text = (SLURM_FIXTURES / "restd_jobs_26.05_real_no_change.json").read_text()
    assert parse_jobs_since(text, asked_since=True) == (None, 0)
