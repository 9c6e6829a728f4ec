"""The tier's uploader: no item holds up the queue, a commit marker waits for its manifests without
blocking the replicas that carry them, and an upload that keeps failing is given up, step and all."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from clusterctl.checkpoint import layout
from clusterctl.checkpoint.manifest import CommitMarker, ShardEntry
from clusterctl.storage import MemoryStorage, StorageError
from clusterctl.tier.server import Uploader
from clusterctl.tier.store import StoredObject, TierStore, chunk_digests


def _put(store: TierStore, key: str, data: bytes, *, primary: bool = True) -> None:
    buf = bytearray(data)
    store.put("ns", key, StoredObject(buf, chunk_digests(memoryview(buf)), primary=primary))


def _marker(step: int, world: int) -> bytes:
    shards = [ShardEntry(r, layout.manifest_key(step, "a", r, world), 2, "0", 1) for r in range(world)]
    return CommitMarker(step, world, "a", time.time(), shards).to_json()


def _has(uri: MemoryStorage, key: str) -> bool:
    return key in {o.key for o in uri.list_objects("")}


def _until(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_marker_waiting_for_a_replicas_manifest_lets_the_replica_go_first() -> None:
    store, uri = TierStore(1 << 30), MemoryStorage()
    uploader = Uploader(store, lambda ns: uri, retry_max=0.1)
    try:
        for rank in (0, 1):  # rank 0's own objects; rank 1's node died, its only copies are replicas here
            _put(store, layout.shard_key(1, "a", rank, 2), b"s", primary=rank == 0)
            _put(store, layout.manifest_key(1, "a", rank, 2), b"{}", primary=rank == 0)
        _put(store, layout.commit_key(1), _marker(1, 2))
        for key in (layout.shard_key(1, "a", 0, 2), layout.manifest_key(1, "a", 0, 2), layout.commit_key(1)):
            uploader.enqueue("upload", "ns", key)
        for key in (layout.shard_key(1, "a", 1, 2), layout.manifest_key(1, "a", 1, 2)):
            uploader.enqueue("handoff", "ns", key, delay=0.1)  # queued behind the marker
        assert _until(lambda: _has(uri, layout.commit_key(1)))
        assert _has(uri, layout.manifest_key(1, "a", 1, 2))
    finally:
        uploader.stop()


def test_an_upload_that_keeps_failing_is_given_up_without_holding_up_other_steps(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, uri = TierStore(1 << 30), MemoryStorage()

    def broken(op: str, key: str) -> None:
        if op == "put" and key == layout.shard_key(1, "a", 0, 1):
            raise StorageError("permission denied", key=key)

    uri.fault = broken
    uploader = Uploader(store, lambda ns: uri, retry_max=0.05, give_up=3.0)
    try:
        for step in (1, 2):
            for key in (layout.shard_key(step, "a", 0, 1), layout.manifest_key(step, "a", 0, 1)):
                _put(store, key, b"x")
                uploader.enqueue("upload", "ns", key)
        assert _until(lambda: _has(uri, layout.manifest_key(2, "a", 0, 1)), timeout=3.0)
        gave_up = [r for r in caplog.records if "gave up uploading" in r.getMessage()]
        assert not gave_up, "step 2 went up only once step 1 was given up: it waited behind it"
        assert _until(lambda: any("gave up uploading" in r.getMessage() for r in caplog.records))
        time.sleep(0.1)
        assert not _has(uri, layout.manifest_key(1, "a", 0, 1))  # step 1 never shows half-uploaded
        assert _until(lambda: not uploader._queue)
    finally:
        uploader.stop()


def test_stop_ends_the_thread_and_closes_the_storages() -> None:
    closed: list[str] = []

    class Uri(MemoryStorage):
        def close(self) -> None:
            closed.append("ns")

    store = TierStore(1 << 20)
    uploader = Uploader(store, lambda ns: Uri())
    _put(store, layout.shard_key(1, "a", 0, 1), b"x")
    uploader.enqueue("upload", "ns", layout.shard_key(1, "a", 0, 1))
    assert _until(lambda: not uploader._queue)
    uploader.stop()
    assert not uploader._thread.is_alive() and closed == ["ns"]


def test_a_delayed_item_survives_a_clock_that_passes_its_due_time_while_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, uri = TierStore(1 << 20), MemoryStorage()
    real = time.monotonic
    calls = {"n": 0}

    def racing() -> float:  # each reading 0.3 s after the last: "due - now" turns negative between two
        calls["n"] += 1
        return real() + 0.3 * calls["n"]

    uploader = Uploader(store, lambda ns: uri, retry_max=0.05)
    try:
        _put(store, layout.shard_key(1, "a", 0, 1), b"x", primary=False)
        monkeypatch.setattr(time, "monotonic", racing)
        uploader.enqueue("handoff", "ns", layout.shard_key(1, "a", 0, 1), delay=0.4)
        for _ in range(250):  # the clock is fake: wait by count
            if _has(uri, layout.shard_key(1, "a", 0, 1)):
                break
            time.sleep(0.02)
        monkeypatch.setattr(time, "monotonic", real)
        assert _has(uri, layout.shard_key(1, "a", 0, 1))
        assert uploader._thread.is_alive()
    finally:
        monkeypatch.setattr(time, "monotonic", real)
        uploader.stop()


def test_an_object_waiting_behind_a_failing_one_does_not_spin() -> None:
    store, uri = TierStore(1 << 20), MemoryStorage()

    def down(op: str, key: str) -> None:
        if op == "put" and key == layout.shard_key(1, "a", 0, 1):
            raise StorageError("URI down", key=key)

    uri.fault = down
    uploader = Uploader(store, lambda ns: uri, retry_max=1.0)
    try:
        for key in (layout.shard_key(1, "a", 0, 1), layout.manifest_key(1, "a", 0, 1)):
            _put(store, key, b"x")
            uploader.enqueue("upload", "ns", key)
        time.sleep(0.3)  # the shard backs off; its manifest waits behind it
        assert uploader._thread.ident is not None
        clock = time.pthread_getcpuclockid(uploader._thread.ident)  # the uploader thread's CPU alone
        cpu = time.clock_gettime(clock)
        time.sleep(0.5)
        assert time.clock_gettime(clock) - cpu < 0.25
        assert not _has(uri, layout.manifest_key(1, "a", 0, 1))
    finally:
        uploader.stop()
