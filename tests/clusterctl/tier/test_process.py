"""Finding and starting a job's tiers: a silent tier process is not waited on forever, and several
ranks without the job's tiers are refused at once instead of timing out at the first commit."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clusterctl.checkpoint import CheckpointManager
from clusterctl.tier import TierError, process, spawn_tier
from clusterctl.tier.process import ENV_ADDR, ENV_JOB, ENV_PEERS, ENV_SECRET


def test_a_tier_process_that_never_says_where_it_listens_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[subprocess.Popen[str]] = []
    real = subprocess.Popen

    def silent(argv: list[str], **kwargs: Any) -> subprocess.Popen[str]:
        started.append(real([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs))
        return started[-1]

    monkeypatch.setattr(process.subprocess, "Popen", silent)
    begin = time.monotonic()
    with pytest.raises(TierError, match=r"nothing within 0\.5 s"):
        spawn_tier(start_timeout=0.5)
    assert time.monotonic() - begin < 10
    assert started[0].poll() is not None


def test_several_ranks_without_the_jobs_tiers_are_refused_naming_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (ENV_ADDR, ENV_PEERS, ENV_JOB, ENV_SECRET):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=f"--checkpoint-tier memory.*{ENV_ADDR}"):
        CheckpointManager(str(tmp_path), rank=1, world_size=2, tier="memory")


def test_ranks_of_an_allocation_whose_tiers_all_failed_save_to_the_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_ADDR, raising=False)
    monkeypatch.setenv(ENV_PEERS, "")  # the batch script's wait found no tier (and said why on stderr)
    monkeypatch.setenv(ENV_JOB, "record-4")
    monkeypatch.setenv(ENV_SECRET, "ab" * 32)
    with CheckpointManager(str(tmp_path), rank=1, world_size=2, tier="memory") as ckpt:
        assert ckpt.storage is ckpt.durable_storage
