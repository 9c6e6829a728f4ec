"""The stop agreement of one run: every rank holds, then the highest step held is the stop step."""

from __future__ import annotations

from clusterd.liveness.stopping import StopAgreement


def test_no_step_until_every_rank_holds_then_the_highest_held() -> None:
    stop = StopAgreement()
    assert not stop.under_way
    assert stop.claim(1, 30, world_size=3) is None and stop.under_way
    assert stop.claim(0, 12, world_size=3) is None
    assert stop.claim(2, 17, world_size=3) == 30
    assert stop.held == {0: 12, 1: 30, 2: 17}


def test_step_zero_is_a_step() -> None:
    stop = StopAgreement()
    stop.claim(0, 0, world_size=2)
    assert stop.claim(1, 0, world_size=2) == 0


def test_the_decision_stands_whatever_is_claimed_after() -> None:
    stop = StopAgreement()
    stop.claim(0, 5, world_size=1)
    assert stop.claim(0, 9, world_size=1) == 5
    assert stop.decide(world_size=4) == 5 and stop.held == {0: 5}


def test_a_rank_that_claims_again_keeps_its_highest_claim() -> None:
    stop = StopAgreement()
    stop.claim(0, 8, world_size=2)
    stop.claim(0, 6, world_size=2)
    assert stop.held == {0: 8}
    assert stop.claim(1, 7, world_size=2) == 8


def test_a_run_that_grows_waits_for_its_new_ranks() -> None:
    stop = StopAgreement()
    stop.claim(0, 3, world_size=2)
    assert stop.decide(world_size=3) is None  # a rank reported a larger world meanwhile
    stop.claim(1, 4, world_size=3)
    assert stop.decide(world_size=3) is None
    assert stop.claim(2, 2, world_size=3) == 4


def test_no_ranks_decide_nothing() -> None:
    assert StopAgreement().decide(world_size=0) is None
