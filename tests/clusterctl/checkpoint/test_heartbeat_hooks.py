"""CheckpointManager's block enters the job's runtime; it reports save/commit/restore to the heartbeat sender."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from clusterctl import heartbeat
from clusterctl.checkpoint import CheckpointManager
from clusterctl.storage import MemoryStorage
from tests.support.heartbeat import FakeJobService, child_env, heartbeat_env, serve

from .helpers import fast_config


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int | None]]:
    seen: list[tuple[str, int | None]] = []
    monkeypatch.setattr(heartbeat, "start", lambda: seen.append(("start", None)))
    monkeypatch.setattr(heartbeat, "report_step", lambda step: seen.append(("step", step)))
    monkeypatch.setattr(heartbeat, "report_committed", lambda step: seen.append(("committed", step)))
    monkeypatch.setattr(heartbeat, "report_restored", lambda: seen.append(("restored", None)))
    return seen


def test_the_manager_reports_start_saves_commits_and_restores(reports: list[tuple[str, int | None]]) -> None:
    storage = MemoryStorage()
    ckpt = CheckpointManager("/unused", rank=0, world_size=1, keep=0, storage=storage, config=fast_config())
    assert reports == [], "constructing a manager starts nothing: its block enters the runtime"
    with ckpt:
        assert reports == [("start", None)]
        assert ckpt.restore() is None
        assert reports[-1] == ("restored", None)
        ckpt.save(7, {"w": np.ones(4)}).result()
        assert ("step", 7) in reports and reports[-1] == ("committed", 7)
        reports.clear()
        ckpt.restore()
        assert reports == [("committed", 7), ("restored", None)]


def test_a_failed_close_leaving_the_block_is_reported(
    reports: list[tuple[str, int | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heartbeat, "finish", lambda code: reports.append(("finish", code)))
    storage = MemoryStorage()
    ckpt = CheckpointManager("/unused", rank=0, world_size=1, storage=storage, config=fast_config())
    close = ckpt.close

    def failing_close() -> None:  # as a background save that failed is raised by close()
        close()
        raise RuntimeError("upload failed")

    monkeypatch.setattr(ckpt, "close", failing_close)
    with pytest.raises(RuntimeError, match="upload failed"), ckpt:
        pass
    assert reports[-1] == ("finish", 1)
    reports.clear()
    with CheckpointManager("/unused", rank=0, world_size=1, storage=storage, config=fast_config()):
        pass
    assert reports == [("start", None)], "a block that ends normally reports no exit"


def test_a_real_sender_sees_what_the_manager_did(tmp_path: Path) -> None:
    code = """
    import sys, time
    import numpy as np
    import clusterctl
    from clusterctl.checkpoint import CheckpointManager
    with clusterctl.job_runtime(), CheckpointManager(sys.argv[1]) as ckpt:
        assert ckpt.restore() is None
        time.sleep(0.5)  # the sender has connected and sent "restored" before the first step
        ckpt.save(3, {"w": np.arange(4)}).result()
    """
    sock = tmp_path / "hb.sock"
    fake = FakeJobService()
    with serve(sock, fake):
        env = heartbeat_env(sock, SLURM_PROCID="0", SLURM_NTASKS="1")
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), str(tmp_path / "ckpt")],
            env=child_env(env),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    beats = fake.requests()
    assert any(b.restored and b.step == -1 for b in beats), "restore() returning is sent at once"
    last = beats[-1]
    assert (last.exiting, last.exit_code, last.step, last.committed_step, last.restored) == (True, 0, 3, 3, True)
    assert (last.rank, last.world_size) == (0, 1)
