"""Rank/world size discovery, run ids, and the requeue-on-signal helper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clusterctl import heartbeat
from clusterctl.heartbeat import StopNews
from clusterctl.slurm_env import REQUEUE_EXIT_CODE, RequeueOnSignal, rank_and_world_size, slurm_run_id


def test_rank_from_slurm() -> None:
    assert rank_and_world_size({"SLURM_PROCID": "3", "SLURM_NTASKS": "8"}) == (3, 8)


def test_rank_defaults() -> None:
    assert rank_and_world_size({}) == (0, 1)
    assert rank_and_world_size({"SLURM_PROCID": "x", "SLURM_NTASKS": "2"}) == (0, 1)
    assert rank_and_world_size({"SLURM_PROCID": "5", "SLURM_NTASKS": "2"}) == (0, 1)
    assert rank_and_world_size({"SLURM_PROCID": "\u00b2", "SLURM_NTASKS": "4"}) == (0, 1)  # isdigit, not a number


def test_run_id() -> None:
    assert slurm_run_id({}) is None
    assert slurm_run_id({"SLURM_JOB_ID": "123", "SLURM_STEP_ID": "0"}) == "slurm-123.0-r0"
    assert slurm_run_id({"SLURM_JOB_ID": "123", "SLURM_STEP_ID": "0", "SLURM_RESTART_COUNT": "2"}) == "slurm-123.0-r2"
    assert (
        slurm_run_id({"SLURM_ARRAY_JOB_ID": "9", "SLURM_ARRAY_TASK_ID": "4", "SLURM_JOB_ID": "12"}) == "slurm-9_4.x-r0"
    )


def test_requeue_exit_code_constant() -> None:
    assert REQUEUE_EXIT_CODE == 85


def test_signal_sets_flag() -> None:
    with RequeueOnSignal() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.wait(5) and stop.requested and stop.signum == signal.SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) is not stop._handle


class Clusterd:
    """The heartbeat module as RequeueOnSignal sees it: what clusterd said, and the claims sent."""

    def __init__(self, news: StopNews | None, answer: StopNews | None = None) -> None:
        self.news, self.answer = news, answer
        self.claims: list[int] = []
        self.waits: list[float] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(heartbeat, "stop_news", lambda: self.news)
        monkeypatch.setattr(heartbeat, "report_stopping", self.claims.append)
        monkeypatch.setattr(heartbeat, "wait_stop", self.wait)

    def wait(self, timeout: float) -> StopNews | None:
        self.waits.append(timeout)
        return self.answer


def test_without_heartbeats_a_rank_stops_at_the_step_of_its_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    clusterd = Clusterd(None)
    clusterd.install(monkeypatch)
    with RequeueOnSignal(agree=False) as stop:
        assert not stop.requested_at(3)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.wait(5) and stop.requested_at(4)
    assert (stop.held_step, stop.stop_step, clusterd.waits) == (4, 4, [])


def test_a_signalled_rank_holds_then_trains_on_to_the_step_clusterd_names(monkeypatch: pytest.MonkeyPatch) -> None:
    clusterd = Clusterd(StopNews(), answer=StopNews(True, 9))
    clusterd.install(monkeypatch)
    with RequeueOnSignal(agree=False, hold_timeout=7) as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.wait(5)
        assert [stop.requested_at(step) for step in range(4, 10)] == [False] * 5 + [True]
    assert (clusterd.claims, clusterd.waits, stop.held_step, stop.stop_step) == ([4], [7], 4, 9)


def test_a_rank_that_hears_of_a_stop_holds_without_a_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    clusterd = Clusterd(StopNews(), answer=StopNews(True, 6))
    clusterd.install(monkeypatch)
    with RequeueOnSignal(agree=False) as stop:
        assert not stop.requested_at(5)
        clusterd.news = StopNews(under_way=True)
        assert stop.requested_at(6) and clusterd.claims == [6] and stop.signum is None


@pytest.mark.parametrize("answer", [StopNews(True, None), StopNews(refused=True)], ids=["timed-out", "refused"])
def test_without_a_named_step_a_rank_stops_where_it_holds(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], answer: StopNews
) -> None:
    clusterd = Clusterd(StopNews(), answer=answer)
    clusterd.install(monkeypatch)
    with RequeueOnSignal(agree=False) as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.wait(5) and stop.requested_at(8) and stop.stop_step == 8
    assert "stopping at step 8 without the other ranks' agreement" in capsys.readouterr().err


def test_sigterm_checkpoints_and_exits_with_requeue_code(tmp_path: Path) -> None:
    """A training loop gets SIGTERM: it commits a checkpoint of the current step and exits 85."""
    uri = tmp_path / "ckpt"
    script = textwrap.dedent(f"""
        import os, signal, numpy as np
        from clusterctl.checkpoint import CheckpointManager
        from clusterctl.slurm_env import RequeueOnSignal
        ckpt = CheckpointManager({str(uri)!r})
        state = {{"w": np.zeros(4)}}
        with RequeueOnSignal() as stop:
            for step in range(1, 1000):
                state["w"] += 1
                if step == 3:
                    ckpt.save(step, state)
                if step == 5:
                    os.kill(os.getpid(), signal.SIGTERM)  # what Slurm sends before the time limit
                if stop.requested:
                    stop.checkpoint_and_exit(ckpt, step, state)
        raise SystemExit(1)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
    )
    assert proc.returncode == REQUEUE_EXIT_CODE, proc.stderr
    from clusterctl.checkpoint import CheckpointManager

    with CheckpointManager(str(uri), rank=0, world_size=1) as ckpt:
        assert ckpt.steps() == [3, 5]
        assert (ckpt.restore()["w"] == 5).all()


def test_manager_uses_slurm_rank(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from clusterctl.checkpoint import CheckpointManager

    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    ckpt = CheckpointManager(str(tmp_path))
    assert (ckpt.rank, ckpt.world_size) == (1, 2)
    assert ckpt.run_id.startswith("slurm-77")
    ckpt.close()
