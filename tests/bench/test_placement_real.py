"""What the real-slurmctld placement bench reads from sbatch --test-only, and how it runs without a stack."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from bench import placement_real
from bench.placement import Job, slurm_best_fit
from bench.placement_real import Anchor, Tally, TestOnly, parse_test_only, starts_now
from bench.submit import Sdiag
from clusterd.errors import SlurmUnavailable
from clusterd.topology import TopologyModel


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


def test_agreement_counts_only_jobs_both_start() -> None:
    model = placement_real.fallback_model()
    tallies = {p: Tally() for p in placement_real.PLACERS}
    leaf = model.leaf_nodes(model.leaves[0])
    for ours, slurm in [(None, None), (None, None), (leaf[:2], leaf[:2]), (leaf[:2], leaf[2:4]), (None, leaf[:1])]:
        tallies["ours_any"].add(model, ours, 0.001)
        for placer in ("slurm", "sim", "ours_pack", "slurm_switches"):
            tallies[placer].add(model, slurm, 0.05)
    figures = placement_real.agreement(tallies, real=True)["ours_any"]
    assert figures["both_start_now"] == 2
    assert figures["same_nodes_pct"] == 50.0 and figures["same_leaves_pct"] == 100.0
    assert figures["same_start_now_pct"] == 80.0  # all five jobs: only the last decision differs


def test_sigterm_raises_so_that_the_background_is_cancelled() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped, placement_real.sigterm_exits():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs first
    assert stopped.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_background_has_a_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, ...]] = []

    def refuse(env: dict[str, str], *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 1, "", "no"), 0.0

    monkeypatch.setattr(placement_real, "as_user", refuse)
    with pytest.raises(RuntimeError):
        placement_real.hold({}, "bg", [["node1", "node2"]])
    assert f"--time={placement_real.HOLD_MINUTES}" in asked[0]


@dataclass
class FakeSlurm:
    """The stack as placement_real sees it, Slurm answering with the simulation's pick; its
    model read fails (slurmctld gone) from the ``fail_at``-th on."""

    fail_at: int
    error: Exception
    held: list[str] = field(default_factory=list)
    reads: int = 0
    cancelled: list[str] = field(default_factory=list)

    def model(self) -> TopologyModel:
        return placement_real.fallback_model().with_allocation(self.held, gpus_per_node=4, cpus_per_node=4)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def real_model(env: dict[str, str], bin_dir: str) -> tuple[TopologyModel, float]:
            self.reads += 1
            if self.reads >= self.fail_at:
                raise self.error
            return self.model(), 0.2

        def hold(env: dict[str, str], name: str, busy: list[list[str]]) -> None:
            self.held = [n for b in busy for n in b]

        def ask_slurm(env: dict[str, str], nodes: int, extra: object) -> tuple[tuple[str, ...] | None, float]:
            picked = slurm_best_fit(self.model(), Job(0, 0.0, 0.0, nodes, 4, 4))
            return (tuple(picked) if picked else None), 0.05

        def as_user(env: dict[str, str], *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
            return subprocess.CompletedProcess(argv, 0, "", ""), 0.03

        monkeypatch.setattr(placement_real, "find_anchor", lambda version: Anchor({"X": "1"}, version="22.05"))
        monkeypatch.setattr(placement_real, "real_model", real_model)
        monkeypatch.setattr(placement_real, "hold", hold)
        monkeypatch.setattr(placement_real, "ask_slurm", ask_slurm)
        monkeypatch.setattr(placement_real, "as_user", as_user)
        monkeypatch.setattr(placement_real, "sdiag", lambda env: Sdiag("", {"REQUEST_JOB_WILL_RUN": 0}, {}))
        monkeypatch.setattr(placement_real, "release", lambda env, name: self.held.clear())
        monkeypatch.setattr(placement_real, "cancel_by_name", lambda name, env: self.cancelled.append(name))


def test_a_stack_lost_mid_run_keeps_the_rounds_done(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    slurm = FakeSlurm(fail_at=5, error=SlurmUnavailable("sinfo", None, "Unable to contact slurm controller"))
    slurm.install(monkeypatch)  # three reads a round: the second round's third fails
    result = placement_real.run(jobs=20, seed=1, rounds=4, version=None)
    placement_real.report(result)
    out = capsys.readouterr().out
    assert result["rounds"] == 1 and result["jobs"] == 5 and result["anchor_missing"] is None
    assert "stopped after 1 of 4 backgrounds: SlurmUnavailable: sinfo failed (timed out)" in out
    assert result["placers"]["slurm"]["place_calls"] == 5  # type: ignore[index]
    assert result["agreement"]["sim"]["same_nodes_pct"] == 100.0  # type: ignore[index]
    assert "missing" not in out and slurm.cancelled


@pytest.mark.parametrize(
    "error",
    [
        KeyError("node300"),
        SlurmUnavailable("scontrol", 1, "Connection refused"),
        RuntimeError("background jobs pending after 120 s: BeginTime\n ReqNodeNotAvail"),
    ],
)
def test_a_stack_lost_before_any_round_is_a_missing_anchor(
    error: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    FakeSlurm(fail_at=1, error=error).install(monkeypatch)
    placement_real.report(placement_real.run(jobs=20, seed=1, rounds=4, version=None))
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("slurm (real): anchor missing (stopped: "))
    assert line.startswith(f"slurm (real): anchor missing (stopped: {type(error).__name__}: ") and line.endswith(")")
    assert "Traceback" not in out


def test_without_a_stack_the_header_says_why_and_no_refresh(capsys: pytest.CaptureFixture[str]) -> None:
    placement_real.report(placement_real.run(jobs=4, seed=1, rounds=1, version="99.99"))
    header, *rest = capsys.readouterr().out.splitlines()
    assert "(no Slurm, not compared: no stack in " in header and "(synthetic)" in header
    assert not any(line.startswith("model refresh") for line in rest)
