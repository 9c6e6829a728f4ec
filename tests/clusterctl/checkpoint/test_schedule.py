"""``CheckpointManager(interval=...)`` and ``due()``: None leaves it to the trainer, seconds are fixed,
"auto" follows clusterd's advice within bounds."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from clusterctl import heartbeat
from clusterctl.checkpoint import CheckpointManager
from clusterctl.checkpoint.config import CheckpointConfig
from clusterctl.checkpoint.errors import InvalidStateError
from clusterctl.checkpoint.schedule import MAX_AUTO, MIN_AUTO, SaveSchedule


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "sometimes", True, [5]])
def test_a_bad_interval_is_refused_by_name(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="interval"):
        CheckpointManager(str(tmp_path), interval=bad)  # type: ignore[arg-type]


def test_no_interval_leaves_the_schedule_to_the_trainer(tmp_path: Path) -> None:
    with CheckpointManager(str(tmp_path)) as ckpt:
        assert ckpt.interval is None and ckpt.current_interval() is None and ckpt.due()


def test_a_fixed_interval_is_due_one_interval_after_the_last_save() -> None:
    clock = Clock()
    schedule = SaveSchedule(60, first=300, clock=clock)
    assert not schedule.poll()[0]
    clock.now = 60
    assert schedule.poll()[0]
    schedule.restart()
    clock.now = 100
    assert not schedule.poll()[0]


def test_auto_follows_the_advice_clamped(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    schedule = SaveSchedule("auto", first=300, clock=clock)
    assert schedule.seconds() == 300  # no heartbeats: the first interval
    sender = SimpleNamespace(checkpoint_interval=42.0)
    monkeypatch.setattr(heartbeat, "_sender", sender)
    assert schedule.seconds() == 42.0
    for advised, expect in ((0.0001, MIN_AUTO), (1e12, MAX_AUTO), (float("nan"), 300)):
        sender.checkpoint_interval = advised
        assert schedule.seconds() == expect


def test_a_save_restarts_the_clock_and_reports_its_stall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stalls: list[float] = []
    monkeypatch.setattr(heartbeat, "report_save_stall", stalls.append)
    with CheckpointManager(str(tmp_path), interval=3600, config=CheckpointConfig(auto_first_interval=1)) as ckpt:
        assert not ckpt.due()
        ckpt.save(1, {"w": [1.0, 2.0]}).result()
        assert len(stalls) == 1 and 0 <= stalls[0] < 60
        assert ckpt.current_interval() == 3600.0


def test_a_poll_tells_how_many_polls_are_left_by_their_pace() -> None:
    clock = Clock()
    schedule = SaveSchedule(100, first=300, clock=clock)
    assert schedule.poll() == (False, 0)  # no pace known yet
    clock.now = 1.0
    assert schedule.poll() == (False, 99)  # one second a poll, 99 s left
    clock.now = 100.0
    assert schedule.poll() == (True, 0)


def test_a_skipped_or_refused_save_reports_no_stall_and_keeps_the_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalls: list[float] = []
    monkeypatch.setattr(heartbeat, "report_save_stall", stalls.append)
    config = CheckpointConfig(policy="skip", max_in_flight=1)
    with CheckpointManager(str(tmp_path), interval=3600, config=config) as ckpt:
        clock = Clock()
        ckpt._schedule._clock = clock  # the schedule's clock alone: the save's own timing is real
        gate = threading.Event()
        real = ckpt._run
        monkeypatch.setattr(ckpt, "_run", lambda *a: (gate.wait(30), real(*a))[1])
        try:
            first = ckpt.save(1, {"w": [1.0]})
            assert len(stalls) == 1
            clock.now = 3600.0
            assert ckpt.save(2, {"w": [2.0]}).skipped  # step 1 still uploading
            assert len(stalls) == 1 and ckpt.due()  # the skip took no stall and did not restart the clock
            with pytest.raises(InvalidStateError):
                ckpt.save(-1, {"w": [3.0]})
            assert len(stalls) == 1
        finally:
            gate.set()
        first.result()


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_a_bad_due_timeout_is_refused_by_name(bad: float) -> None:
    with pytest.raises(ValueError, match="due_timeout"):
        CheckpointConfig(due_timeout=bad)
