"""Young/Daly from clusterd's own node history, bounded whatever the inputs."""

from __future__ import annotations

import math

import pytest

from clusterd.config import GoodputConfig
from clusterd.goodput.autopilot import Autopilot, FailureHistory, young_daly

CFG = GoodputConfig(interval_floor_seconds=30, interval_ceiling_seconds=3600, prior_node_mtbf_seconds=10_000)


def test_young_daly_is_the_square_root_of_twice_stall_times_mtbf() -> None:
    assert math.isclose(young_daly(10.0, 5000.0, CFG), math.sqrt(2 * 10 * 5000))


@pytest.mark.parametrize(
    ("stall", "mtbf", "expect"),
    [
        (0.0, 5000.0, 30.0),
        (-3.0, 5000.0, 30.0),
        (1e9, 1e9, 3600.0),
        (float("nan"), 1e3, 3600.0),
        (float("inf"), 1, 3600.0),
    ],
)
def test_advice_stays_within_floor_and_ceiling(stall: float, mtbf: float, expect: float) -> None:
    assert young_daly(stall, mtbf, CFG) == expect


def test_failures_seen_on_a_node_shorten_its_jobs_mtbf() -> None:
    now = [0.0]
    history = FailureHistory(CFG, clock=lambda: now[0])
    now[0] = 10_000.0
    calm = history.job_mtbf(["a", "b"])
    assert math.isclose(calm, 1 / (2 * 1 / 20_000))  # the prior alone, for two nodes
    history.note(["a"], 5_000.0)
    history.note(["a"], 9_000.0)
    assert history.job_mtbf(["a", "b"]) < calm
    assert history.job_mtbf(["b"]) == pytest.approx(20_000.0)  # another node's failures are not b's


def test_failures_older_than_the_window_are_forgotten() -> None:
    now = [0.0]
    history = FailureHistory(
        GoodputConfig(failure_window_seconds=100, prior_node_mtbf_seconds=1000), clock=lambda: now[0]
    )
    history.note(["a"], 0.0)
    now[0] = 500.0
    assert history.job_mtbf(["a"]) == pytest.approx((100 + 1000) / 1)


def test_no_advice_before_a_save_was_measured() -> None:
    pilot = Autopilot(FailureHistory(CFG), CFG)
    assert pilot.advise(None, ["a"]) is None
    assert CFG.interval_floor_seconds <= (pilot.advise(2.0, ["a"]) or 0) <= CFG.interval_ceiling_seconds


def test_one_node_death_under_many_jobs_is_one_failure() -> None:
    now = [10_000.0]
    history = FailureHistory(CFG, clock=lambda: now[0])
    once = FailureHistory(CFG, clock=lambda: now[0])
    once.note(["a"], 9_000.0)
    for job in range(50):  # a tenant's 50 small jobs on the node that died: each notes it
        history.note(["a"], 9_000.0 + job)
    assert history.job_mtbf(["a"]) == pytest.approx(once.job_mtbf(["a"]))


def test_failures_noted_out_of_order_still_leave_the_window() -> None:
    now = [0.0]
    history = FailureHistory(
        GoodputConfig(failure_window_seconds=1000, prior_node_mtbf_seconds=1000), clock=lambda: now[0]
    )
    history.note(["a"], 5_000.0)
    history.note(["a"], 100.0)  # noted late, and older
    now[0] = 5_500.0
    assert history.job_mtbf(["a"]) == pytest.approx((1000 + 1000) / 2)  # the one in the window only
    now[0] = 10_000.0
    history.job_mtbf(["a"])
    assert "a" not in history._failures  # nothing left in the window: the node is forgotten


def test_a_nodes_failures_kept_are_bounded() -> None:
    history = FailureHistory(CFG, clock=lambda: 1e9)
    for i in range(500):
        history.note(["a"], 1e9 - 1e6 + i * 1000.0)
    assert len(history._failures["a"]) <= 64


def test_a_node_that_came_back_and_died_again_is_two_failures() -> None:
    boots = {"a": 100.0}
    history = FailureHistory(CFG, clock=lambda: 10_000.0, boot=lambda node: boots.get(node, 0.0))
    history.note(["a"], 9_000.0)
    history.note(["a"], 9_010.0)  # another job on the same death
    boots["a"] = 9_100.0  # its slurmd started again: revived
    history.note(["a"], 9_200.0)
    assert len(history._failures["a"]) == 2
