"""Rank/world size discovery, run ids, and the requeue-on-signal helper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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
