"""In-flight policy, bounded staging and how background errors surface (in-memory fake storage)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from clusterctl.checkpoint import (
    CheckpointManager,
    SaveError,
    SaveInProgressError,
    StagingLimitError,
)
from clusterctl.checkpoint.staging import StagingPool
from clusterctl.storage import AccessDeniedError, MemoryStorage

from .helpers import GatedStorage, fast_config


def manager(storage: MemoryStorage, **kw: object) -> CheckpointManager:
    return CheckpointManager("/unused", rank=0, world_size=1, keep=0, storage=storage, config=fast_config(**kw))


STATE = {"w": np.ones(1000, dtype=np.float32)}


def test_policy_raise() -> None:
    st = GatedStorage()
    ckpt = manager(st, policy="raise")
    h1 = ckpt.save(1, STATE)
    with pytest.raises(SaveInProgressError, match="step 1 is still in flight"):
        ckpt.save(2, STATE)
    st.gate.set()
    h1.result(timeout=10)
    ckpt.save(2, STATE).result(timeout=10)
    assert ckpt.steps() == [1, 2]
    ckpt.close()


def test_policy_skip() -> None:
    st = GatedStorage()
    ckpt = manager(st, policy="skip")
    h1 = ckpt.save(1, STATE)
    h2 = ckpt.save(2, STATE)
    assert h2.skipped and h2.done() and h2.result().skipped and not h2.result().committed
    st.gate.set()
    h1.result(timeout=10)
    assert ckpt.steps() == [1]
    ckpt.close()


def test_policy_wait_blocks_until_previous_finished() -> None:
    st = GatedStorage()
    ckpt = manager(st)
    h1 = ckpt.save(1, STATE)
    threading.Timer(0.3, st.gate.set).start()
    t0 = time.monotonic()
    h2 = ckpt.save(2, STATE)
    assert time.monotonic() - t0 >= 0.25 and h1.done()
    h2.result(timeout=10)
    ckpt.close()


def test_two_in_flight_allowed() -> None:
    st = GatedStorage()
    ckpt = manager(st, policy="raise", max_in_flight=2)
    ckpt.save(1, STATE)
    ckpt.save(2, STATE)
    with pytest.raises(SaveInProgressError):
        ckpt.save(3, STATE)
    st.gate.set()
    ckpt.wait()
    assert ckpt.steps() == [1, 2]
    ckpt.close()


def test_result_timeout() -> None:
    st = GatedStorage()
    ckpt = manager(st)
    h = ckpt.save(1, STATE)
    with pytest.raises(TimeoutError):
        h.result(timeout=0.05)
    st.gate.set()
    assert h.result(timeout=10).committed
    ckpt.close()


def denied_on(suffix: str) -> MemoryStorage:
    st = MemoryStorage()

    def fault(op: str, key: str) -> None:
        if op == "put" and key.endswith(suffix):
            raise AccessDeniedError(f"{key}: access denied (AccessDenied: no write permission)", key=key)

    st.fault = fault
    return st


def test_background_error_names_rank_object_and_cause() -> None:
    ckpt = manager(denied_on(".manifest.json"))
    with pytest.raises(SaveError) as info:
        ckpt.save(4, STATE).result(timeout=10)
    msg = str(info.value)
    assert msg.startswith("rank 0: saving step 4 failed at memory://")
    assert "rank-00000-of-00001.manifest.json" in msg and "access denied" in msg
    assert isinstance(info.value.__cause__, AccessDeniedError)
    assert (info.value.rank, info.value.step) == (0, 4)
    ckpt.storage.fault = None  # type: ignore[attr-defined]
    ckpt.save(5, STATE).result()  # observed through result(): not raised again
    ckpt.close()


def test_unobserved_error_raised_by_next_save_once() -> None:
    ckpt = manager(denied_on(".safetensors"))
    h = ckpt.save(1, STATE)
    while not h.done():
        time.sleep(0.01)
    with pytest.raises(SaveError, match="step 1"):
        ckpt.save(2, STATE)
    ckpt.storage.fault = None  # type: ignore[attr-defined]
    ckpt.save(2, STATE).result()
    ckpt.close()


def test_unobserved_error_raised_by_wait_and_close() -> None:
    ckpt = manager(denied_on(".safetensors"))
    ckpt.save(1, STATE)
    with pytest.raises(SaveError, match="access denied"):
        ckpt.wait()
    ckpt.wait()  # raised once
    ckpt.save(2, STATE)
    with pytest.raises(SaveError):
        ckpt.close()


def test_staging_limit() -> None:
    ckpt = manager(MemoryStorage(), staging_bytes=10_000)
    with pytest.raises(StagingLimitError, match="staging_bytes=10000"):
        ckpt.save(1, {"w": np.ones(10_000, dtype=np.float32)})
    ckpt.save(1, {"w": np.ones(100, dtype=np.float32)}).result()
    ckpt.close()


def test_staging_pool_bounds_and_reuse() -> None:
    pool = StagingPool(capacity=1000, slots=1)
    a = pool.acquire(600)
    with pytest.raises(StagingLimitError):
        pool.acquire(100, timeout=0.05)  # the one slot is in use
    backing = a.backing
    a.release()
    b = pool.acquire(500)
    assert b.backing is backing and b.array.nbytes == 500  # reused, no new allocation
    b.release()
    c = pool.acquire(900)  # bigger: the old buffer is dropped to stay under capacity
    assert pool.allocated_bytes == 900
    c.release()
    with pytest.raises(StagingLimitError):
        pool.acquire(1001)


def test_staging_memory_is_reused_across_saves() -> None:
    ckpt = manager(MemoryStorage())
    for step in range(3):
        ckpt.save(step, STATE).result()
    assert ckpt._pool.allocated_bytes < 2 * 4000 + 1000
    ckpt.close()


def test_closed_manager_refuses() -> None:
    ckpt = manager(MemoryStorage())
    ckpt.close()
    ckpt.close()
    with pytest.raises(Exception, match="closed"):
        ckpt.save(1, STATE)
