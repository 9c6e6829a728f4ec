"""What the real-slurmctld placement bench reads from sbatch --test-only, and how it runs without a stack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bench import placement_real
from bench.placement import Job
from bench.placement_real import Tally, TestOnly, parse_test_only, starts_now


def test_where_and_when_a_job_would_start() -> None:
    text = (
        "sbatch: Job 4549 to start at 2026-11-29T10:43:40 using 80 processors on nodes "
        "node[1-16,43-46] in partition debug\n"
    )
    answer = parse_test_only(text)
    assert answer == TestOnly(
        datetime(2026, 11, 29, 10, 43, 40, tzinfo=UTC), tuple(f"node{i}" for i in [*range(1, 17), *range(43, 47)])
    )


def test_one_node() -> None:
    answer = parse_test_only(
        "sbatch: Job 7 to start at 2027-11-29T10:43:51 using 4 processors on nodes node3 in partition batch"
    )
    assert answer is not None and answer.nodes == ("node3",) and answer.start.year == 2027


def test_a_request_no_placement_could_satisfy_is_refused() -> None:
    assert parse_test_only("allocation failure: Requested node configuration is not available\n") is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
        "sbatch: Job 12 to start at soon using 4 processors on nodes node1 in partition debug",
    ],
)
def test_anything_else_is_an_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_test_only(text)


def test_without_a_stack_the_anchor_is_missing_and_the_rows_stay(capsys: pytest.CaptureFixture[str]) -> None:
    result = placement_real.run(jobs=8, seed=1, rounds=2, version="99.99")  # no such stack
    placement_real.report(result)
    out = capsys.readouterr().out
    assert "slurm (real): anchor missing (no stack in " in out
    assert "mean leaf switches / job" in out and "missing" in out.split("mean leaf switches / job")[1].splitlines()[0]
    assert result["placers"]["ours_any"]["jobs_started"] == 8  # type: ignore[index]


PROBE = datetime(2026, 11, 29, 10, 43, 40, 500_000, tzinfo=UTC)


@pytest.mark.parametrize(("after", "now"), [(-0.5, True), (0, True), (59, True), (120, False), (600, False)])
def test_a_job_starts_now_within_a_minute_of_the_probe(after: float, now: bool) -> None:
    answer = TestOnly(PROBE + timedelta(seconds=after), ("node1",))
    assert starts_now(answer, PROBE) is now


def test_a_start_before_the_probe_is_another_zone_not_now() -> None:
    with pytest.raises(ValueError, match="not UTC"):
        starts_now(TestOnly(PROBE - timedelta(hours=1), ("node1",)), PROBE)


def test_the_pack_plan_hands_slurm_its_switch_limit() -> None:
    model = placement_real.fallback_model()
    tallies = {p: Tally() for p in placement_real.PLACERS}
    jobs = [Job(0, 0.0, 0.0, 1, 4, 4), Job(1, 0.0, 0.0, 20, 4, 4)]
    assert placement_real.plan_all(model, jobs, tallies) == [[], ["--switches=2@5:00"]]
    assert [len(tallies[p].picks) for p in ("ours_any", "ours_pack", "sim")] == [2, 2, 2]
