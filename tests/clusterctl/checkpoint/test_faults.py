"""Fault injection: corrupt, truncated and missing objects, S3 outages, GC racing a save."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from clusterctl.checkpoint import (
    CheckpointFallbackWarning,
    CheckpointManager,
    CorruptCheckpointError,
    RestoreError,
    SaveError,
    WorldSizeMismatchError,
    layout,
)
from clusterctl.storage import MemoryStorage, Storage

from .helpers import fast_config


def state_for(step: int) -> dict[str, Any]:
    return {"w": np.full((256, 256), step, dtype=np.float32), "step": step, "blob": bytes([step]) * 10}


def two_steps(uri: str) -> CheckpointManager:
    ckpt = CheckpointManager(uri, rank=0, world_size=1, keep=0, config=fast_config())
    ckpt.save(1, state_for(1)).result()
    ckpt.save(2, state_for(2)).result()
    return ckpt


def shard_of(ckpt: CheckpointManager, step: int) -> str:
    [key] = [o.key for o in ckpt.storage.list_objects(layout.step_prefix(step)) if o.key.endswith(".safetensors")]
    return key


def manifest_of(ckpt: CheckpointManager, step: int) -> str:
    return shard_of(ckpt, step).replace(".safetensors", ".manifest.json")


def flip_byte(st: Storage, key: str, where: float = 0.5) -> None:
    data = bytearray(st.get(key))
    i = int(len(data) * where)
    data[i] ^= 0x40
    st.put(key, bytes(data))


def truncate(st: Storage, key: str) -> None:
    st.put(key, st.get(key)[:-100])


def delete(st: Storage, key: str) -> None:
    st.delete([key])


CORRUPTIONS: dict[str, Callable[[CheckpointManager], None]] = {
    "flipped_data_byte": lambda c: flip_byte(c.storage, shard_of(c, 2)),
    "flipped_header_byte": lambda c: flip_byte(c.storage, shard_of(c, 2), where=0.0001),
    "truncated_shard": lambda c: truncate(c.storage, shard_of(c, 2)),
    "deleted_shard": lambda c: delete(c.storage, shard_of(c, 2)),
    "deleted_manifest": lambda c: delete(c.storage, manifest_of(c, 2)),
    "edited_manifest": lambda c: flip_byte(c.storage, manifest_of(c, 2), where=0.9),
    "garbage_marker": lambda c: c.storage.put(layout.commit_key(2), b"{not json"),
    "marker_of_newer_format": lambda c: c.storage.put(
        layout.commit_key(2), json.dumps({"format": "clusterctl.checkpoint.commit", "version": 99}).encode()
    ),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_restore_falls_back_past_a_corrupt_step(any_uri: str, corruption: str) -> None:
    ckpt = two_steps(any_uri)
    CORRUPTIONS[corruption](ckpt)
    with pytest.warns(CheckpointFallbackWarning, match="step 2"):
        state = ckpt.restore()
    assert state["step"] == 1 and (state["w"] == 1).all()
    assert ckpt.last_restored_step == 1
    with pytest.raises(CorruptCheckpointError) as info:
        ckpt.restore(step=2)
    assert info.value.step == 2
    ckpt.close()


def test_every_step_corrupt_raises(posix_uri: str) -> None:
    ckpt = two_steps(posix_uri)
    for step in (1, 2):
        flip_byte(ckpt.storage, shard_of(ckpt, step))
    with pytest.warns(CheckpointFallbackWarning), pytest.raises(RestoreError, match="no valid checkpoint"):
        ckpt.restore()
    ckpt.close()


def test_restore_of_uncommitted_step(posix_uri: str) -> None:
    ckpt = two_steps(posix_uri)
    with pytest.raises(RestoreError, match="step 5 is not committed"):
        ckpt.restore(step=5)
    ckpt.close()


def test_world_size_mismatch_is_explained(posix_uri: str) -> None:
    two_steps(posix_uri).close()
    with CheckpointManager(posix_uri, rank=1, world_size=4) as ckpt:
        with pytest.raises(WorldSizeMismatchError) as info:
            ckpt.restore()
        assert "saved by 1 rank(s) but 4 are restoring" in str(info.value)
        assert (info.value.saved, info.value.current) == (1, 4)
        assert ckpt.restore(rank=0)["step"] == 2  # explicit rank: read a saved shard anyway


def test_committed_step_is_never_overwritten(posix_uri: str) -> None:
    ckpt = two_steps(posix_uri)
    with pytest.raises(SaveError, match="already committed"):
        ckpt.save(2, state_for(99)).result()
    assert ckpt.restore()["step"] == 2
    ckpt.close()


@pytest.mark.s3
def test_s3_stopped_mid_save(s3_uri: str, s3_env: Any) -> None:
    """The server dies during the multipart upload: clear error, no commit; after restart saves work."""
    config = fast_config(max_attempts=2, connect_timeout=1.0, read_timeout=3.0)
    ckpt = CheckpointManager(s3_uri, rank=0, world_size=1, keep=0, config=config)
    ckpt.save(1, state_for(1)).result()
    big = {"w": np.ones(4 << 20, dtype=np.float32), "step": 2}  # 16 MiB: 4 parts of 5 MiB
    client = ckpt.storage.client  # type: ignore[attr-defined]
    killed = threading.Event()

    def stop_server(**_: Any) -> None:
        if not killed.is_set():
            killed.set()
            s3_env.stop()

    client.meta.events.register("before-call.s3.UploadPart", stop_server)
    try:
        t0 = time.monotonic()
        with pytest.raises(SaveError) as info:
            ckpt.save(2, big).result(timeout=60)
        assert time.monotonic() - t0 < 30
        msg = str(info.value)
        assert killed.is_set()
        assert "rank 0" in msg and "step 2" in msg and "rank-00000-of-00001.safetensors" in msg
        assert "gave up after retries" in msg
        assert info.value.key is not None and info.value.key.endswith(".safetensors")
    finally:
        client.meta.events.unregister("before-call.s3.UploadPart", stop_server)
        s3_env.start()
    assert ckpt.steps() == [1]
    ckpt.save(2, big).result(timeout=60)  # same step again: a new attempt, committed
    ckpt.save(3, state_for(3)).result(timeout=60)
    assert ckpt.steps() == [1, 2, 3]
    assert ckpt.restore(step=2)["step"] == 2
    ckpt.gc(grace=0)  # the failed attempt's orphaned multipart upload is aborted
    assert ckpt.storage.list_incomplete("steps/") == []
    ckpt.close()


class SlowStorage(MemoryStorage):
    """Memory storage whose writes of matching keys block until released."""

    def __init__(self, suffix: str) -> None:
        super().__init__()
        self.suffix = suffix
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fault = self._block

    def _block(self, op: str, key: str) -> None:
        if op == "put" and key.endswith(self.suffix):
            self.entered.set()
            assert self.release.wait(30)


def test_gc_during_a_save_keeps_the_save() -> None:
    storage = SlowStorage(".manifest.json")  # the shard is written; the manifest write hangs
    ckpt = CheckpointManager("/unused", rank=0, world_size=1, keep=0, storage=storage, config=fast_config())
    h = ckpt.save(1, state_for(1))
    assert storage.entered.wait(10)
    written = sorted(o.key.split(".", 1)[1] for o in storage.list_objects("steps/"))
    assert written == ["safetensors", "writer.json"]  # the rank's claim, then its shard
    report = ckpt.gc(grace=0)  # same process: the in-flight attempt is protected even with no grace
    assert report.objects == [] and report.in_flight == 2
    other = CheckpointManager("/unused", rank=0, world_size=1, storage=storage, config=fast_config())
    assert other.gc(grace=3600).objects == []  # another process: protected by the grace period
    storage.fault = None
    storage.release.set()
    assert h.result(timeout=10).committed
    assert ckpt.restore()["step"] == 1
    ckpt.close()


def test_gc_collects_only_old_uncommitted_objects() -> None:
    age = [0.0]
    storage = MemoryStorage(clock=lambda: time.time() - age[0])
    ckpt = CheckpointManager("/unused", rank=0, world_size=1, keep=0, storage=storage, config=fast_config(gc_grace=100))
    age[0] = 1000.0  # the committed step is old too: it must survive because it is committed
    ckpt.save(1, state_for(1)).result()
    # debris of a failed attempt of step 2, an orphaned upload and a stale attempt of step 1: old
    storage.put("steps/000000000002/deadrun/rank-00000-of-00001.safetensors", b"x" * 10)
    storage.start_incomplete("steps/000000000002/deadrun/rank-00000-of-00001.safetensors")
    storage.put("steps/000000000001/otherattempt/rank-00000-of-00001.safetensors", b"y")
    age[0] = 0.0  # a young uncommitted object (a save in flight on another rank, say)
    storage.put("steps/000000000003/live/rank-00001-of-00002.safetensors", b"z")
    dry = ckpt.gc(grace=100, dry_run=True)
    assert sorted(o.key for o in dry.objects) == [
        "steps/000000000001/otherattempt/rank-00000-of-00001.safetensors",
        "steps/000000000002/deadrun/rank-00000-of-00001.safetensors",
    ]
    assert len(dry.uploads) == 1 and dry.young == 1 and len(storage.list_objects("steps/")) == 6
    ckpt.gc(grace=100)  # left: step 1's shard, manifest and writer claim, and the young object
    assert len(storage.list_objects("steps/")) == 4 and storage.list_incomplete("") == []
    assert ckpt.restore()["step"] == 1
    ckpt.close()


def test_retention_keeps_newest(any_uri: str) -> None:
    with CheckpointManager(any_uri, rank=0, world_size=1, keep=2, config=fast_config()) as ckpt:
        for step in range(1, 6):
            ckpt.save(step, state_for(step))
        ckpt.wait()
        assert ckpt.steps() == [4, 5]
        assert {o.key.split("/")[1] for o in ckpt.storage.list_objects("steps/")} == {"000000000004", "000000000005"}
        assert ckpt.restore()["step"] == 5


def test_store_that_ignores_create_only_puts_is_refused() -> None:
    """A server that ignores If-None-Match: * would let commit markers overwrite each other."""
    from clusterctl.storage import MemoryStorage

    class Ignoring(MemoryStorage):
        def put(self, key: str, data: Any, *, if_absent: bool = False) -> None:
            super().put(key, data)

    with CheckpointManager("mem://x", rank=0, world_size=1, storage=Ignoring(), config=fast_config()) as ckpt:
        with pytest.raises(SaveError, match="If-None-Match"):
            ckpt.save(1, {"a": 1}).result()
        assert ckpt.steps() == []
        assert not ckpt.storage.list_objects("probe/")


@pytest.mark.s3
def test_s3_create_only_probe_passes_and_leaves_nothing(s3_uri: str) -> None:
    with CheckpointManager(s3_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(1, {"a": 1}).result()
        ckpt.save(2, {"a": 2}).result()
        assert ckpt.steps() == [1, 2] and ckpt.storage.list_objects("probe/") == []
