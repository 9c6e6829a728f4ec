"""Several ranks as separate processes (as srun starts them), against real SeaweedFS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clusterctl.checkpoint import CheckpointManager, WorldSizeMismatchError
from clusterctl.storage import open_storage

from .rank_worker import rank_state

WORKER = str(Path(__file__).with_name("rank_worker.py"))


Outcome = list[tuple[int, list[dict[str, Any]]]]


def run_ranks(
    uri: str,
    world: int,
    spec: dict[str, Any],
    env: dict[str, str],
    per_rank: dict[int, dict[str, Any]] | None = None,
    timeout: float = 120,
) -> Outcome:
    job = uuid.uuid4().hex[:8]
    procs = []
    for rank in range(world):
        rank_spec = {**spec, "uri": uri, **((per_rank or {}).get(rank, {}))}
        penv = {
            **os.environ,
            **env,
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(world),
            "SLURM_JOB_ID": job,
            "SLURM_STEP_ID": "0",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, json.dumps(rank_spec)],
                env=penv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        if p.returncode not in (0, -9):
            raise AssertionError(f"rank exited {p.returncode}: {stderr[-3000:]}")
        out.append((p.returncode, lines))
    return out


@pytest.mark.s3
@pytest.mark.parametrize("world", [2, 4])
def test_ranks_save_and_restore_their_shards(s3_uri: str, s3_env: Any, world: int) -> None:
    results = run_ranks(s3_uri, world, {"steps": [1, 2], "size": 300_000}, s3_env.env())
    for rc, lines in results:
        assert rc == 0
        assert [line.get("committed") for line in lines] == [True, True], lines
    for rank in range(world):
        with CheckpointManager(s3_uri, rank=rank, world_size=world) as ckpt:
            assert ckpt.steps() == [1, 2]
            state = ckpt.restore()
            expected = rank_state(rank, 2, 300_000)
            np.testing.assert_array_equal(state["w"], expected["w"])
            assert state["rank"] == rank and (state["nested"]["ids"] == rank).all()
    with (
        CheckpointManager(s3_uri, rank=0, world_size=world + 1) as ckpt,
        pytest.raises(WorldSizeMismatchError, match=f"saved by {world} rank"),
    ):
        ckpt.restore()


@pytest.mark.s3
def test_kill_9_of_a_rank_mid_upload(s3_uri: str, s3_env: Any) -> None:
    """Rank 1 is SIGKILLed during the multipart upload of step 2: step 2 never commits, step 1 restores."""
    results = run_ranks(
        s3_uri,
        2,
        {"steps": [1, 2], "size": 3 << 20, "commit_timeout": 6},
        s3_env.env(),
        per_rank={1: {"die_at_step": 2}},
    )
    (rc0, lines0), (rc1, lines1) = results
    assert rc0 == 0 and rc1 == -9
    assert lines0[0] == {"step": 1, "committed": True}
    assert lines0[1]["type"] == "CommitTimeoutError" and "rank(s) [1]" in lines0[1]["error"]
    assert lines1 == [{"step": 1, "committed": True}]
    for rank in range(2):
        with CheckpointManager(s3_uri, rank=rank, world_size=2) as ckpt:
            assert ckpt.steps() == [1]
            state = ckpt.restore()
            assert state["step"] == 1 and state["rank"] == rank
            np.testing.assert_array_equal(state["w"], rank_state(rank, 1, 3 << 20)["w"])
    # The dead rank left an orphaned multipart upload, rank 0 an uncommitted shard: GC removes both.
    storage = open_storage(s3_uri)
    assert storage.list_incomplete("steps/")
    with CheckpointManager(s3_uri, rank=0, world_size=2) as ckpt:
        report = ckpt.gc(grace=0)
        assert report.uploads and report.objects
        assert all("/000000000002/" in o.key for o in report.objects)
    assert storage.list_incomplete("steps/") == []
    assert {k.key.split("/")[1] for k in storage.list_objects("steps/")} == {"000000000001"}
    storage.close()


def test_ranks_on_posix(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    results = run_ranks(uri, 2, {"steps": [7], "size": 1000}, {})
    assert all(rc == 0 and lines == [{"step": 7, "committed": True}] for rc, lines in results)
    with CheckpointManager(uri, rank=1, world_size=2) as ckpt:
        assert ckpt.restore()["rank"] == 1
