"""Rank and world size: a process group, then torchrun's variables, then Slurm's; and two processes
that claim the same rank of one step, which must not commit it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clusterctl.checkpoint import CheckpointManager, DuplicateWriterError
from clusterctl.ranks import rank_and_world_size
from clusterctl.storage.memory import MemoryStorage
from tests.support.ports import free_port

from .helpers import fast_config

WORKER = str(Path(__file__).with_name("ranks_worker.py"))
SRUN_TASK = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"}


def test_torchrun_variables_beat_slurm() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", **SRUN_TASK}
    assert rank_and_world_size(env) == (1, 4)
    assert rank_and_world_size({**env, "RANK": "4"}) == (0, 1)  # out of range: neither pair is usable
    assert rank_and_world_size({"RANK": "2", "WORLD_SIZE": "8", "SLURM_PROCID": "5"}) == (2, 8)
    assert rank_and_world_size({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}) == (1, 2)


def _env(extra: dict[str, str]) -> dict[str, str]:
    drop = ("SLURM_", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "TORCHELASTIC_", "CLUSTERCTL_")
    base = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**base, "CLUSTERCTL_HEARTBEAT": "0", **extra}


def _outputs(procs: list[subprocess.Popen[str]]) -> list[dict[str, object]]:
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-3000:]
        outs.extend(_objects(stdout))
    return sorted(outs, key=lambda o: float(o["me"]))  # type: ignore[arg-type]


def _objects(text: str) -> list[dict[str, object]]:
    """Every JSON object printed at a line's start: torchrun's processes share one stdout, so a
    second object may follow the first on its line."""
    decoder, found = json.JSONDecoder(), []
    for line in text.splitlines():
        at = 0
        while line.startswith("{", at):
            obj, at = decoder.raw_decode(line, at)
            found.append(obj)
    return found


def _torchrun(mode: str, uri: str) -> list[dict[str, object]]:
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        pytest.skip("torchrun is not installed beside this python")
    cmd = [torchrun, "--standalone", "--nproc-per-node=2", WORKER, mode, uri]
    return _outputs(
        [subprocess.Popen(cmd, env=_env(SRUN_TASK), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    )


@pytest.mark.parametrize("mode", ["env", "group"])
def test_torchrun_under_one_srun_task(tmp_path: Path, mode: str) -> None:
    """``srun torchrun --nproc-per-node=2``: both processes inherit SLURM_PROCID=0 of one task."""
    outs = _torchrun(mode, str(tmp_path / "ckpt"))
    assert [o["before"] for o in outs] == [[0, 2], [1, 2]]
    assert [(o["committed"], o["restored"], o["after"]) for o in outs] == [(True, 0.0, [0, 2]), (True, 1.0, [1, 2])]


def test_manager_created_before_the_process_group(tmp_path: Path) -> None:
    port, uri = str(free_port()), str(tmp_path / "ckpt")
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, "late", uri, str(r), port],
            env=_env(SRUN_TASK),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = _outputs(procs)
    assert [o["before"] for o in outs] == [[0, 1], [0, 1]]  # what Slurm says before the group exists
    assert [(o["committed"], o["restored"], o["after"]) for o in outs] == [(True, 0.0, [0, 2]), (True, 1.0, [1, 2])]


def test_two_processes_with_one_slurm_rank_do_not_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "ckpt")
    env = _env({**SRUN_TASK, "SLURM_NTASKS": "2"})
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, "dup", uri, str(r)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = _outputs(procs)
    assert [o["committed"] for o in outs] == [False, False]
    for o in outs:
        assert str(o["error"]).startswith("DuplicateWriterError: step 1 not committed: rank 0 of 2"), o
        assert str(o["error"]).count(" pid ") == 2, o  # both writers named
    assert not (Path(uri) / "commits").exists() or not list((Path(uri) / "commits").iterdir())


class GatedStorage(MemoryStorage):
    """Memory storage whose first manifest write waits until a gate opens."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.fault = self._hold

    def _hold(self, op: str, key: str) -> None:
        if op == "put" and key.endswith(".manifest.json"):
            assert self.gate.wait(30)


def test_second_writer_of_a_rank_stops_the_commit() -> None:
    storage = GatedStorage()
    config = fast_config(run_id="job-1")
    first = CheckpointManager("/unused", rank=0, world_size=1, storage=storage, config=config)
    second = CheckpointManager("/unused", rank=0, world_size=1, storage=storage, config=config)
    handles = [first.save(3, {"w": b"first"}), second.save(3, {"w": b"second"})]
    # Whichever background save claims the rank second is refused at its claim, before writing its
    # shard; the claim holder waits at the gate (which one is first is the threads' order).
    deadline = time.monotonic() + 10
    while not any(h.done() for h in handles) and time.monotonic() < deadline:
        time.sleep(0.01)
    late_handle = next(h for h in handles if h.done())
    with pytest.raises(DuplicateWriterError) as late:
        late_handle.result(timeout=0)
    storage.gate.set()
    with pytest.raises(DuplicateWriterError) as early:
        next(h for h in handles if h is not late_handle).result(timeout=10)  # the holder does not commit
    assert first.steps() == []
    for err in (late.value, early.value):
        assert set(err.writers) == {first._writer, second._writer}
        assert first._writer in str(err) and second._writer in str(err)
    first.close()
    second.close()


def test_duplicate_writers_on_real_storage(any_uri: str) -> None:
    """Both think they are rank 0 of 2: the claim holder waits for rank 1 and finds the conflict."""
    config = fast_config(run_id="job-2")
    first = CheckpointManager(any_uri, rank=0, world_size=2, config=config)
    second = CheckpointManager(any_uri, rank=0, world_size=2, config=config)
    handles = [first.save(1, {"w": b"a"}), second.save(1, {"w": b"b"})]
    for h in handles:
        with pytest.raises(DuplicateWriterError, match="rank 0 of 2 was saved by two processes"):
            h.result(timeout=15)
    assert first.steps() == []
    first.close()
    second.close()
