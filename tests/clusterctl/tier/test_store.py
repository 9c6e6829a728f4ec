"""The tier's memory cap: a refused put drops nothing, and the newest committed step that is not yet
on the URI is never dropped for a step still being written."""

from __future__ import annotations

import pytest

from clusterctl.checkpoint import layout
from clusterctl.tier import TierFullError
from clusterctl.tier.store import StoredObject, TierStore, chunk_digests

MIB = 1 << 20


def _obj(size: int) -> StoredObject:
    buf = bytearray(size)
    return StoredObject(buf, chunk_digests(memoryview(buf)), primary=True)


def test_a_refused_put_drops_no_older_step() -> None:
    store = TierStore(10 * MIB)
    store.put("ns", layout.shard_key(1, "a", 0, 1), _obj(4 * MIB))
    store.put("ns", layout.shard_key(2, "a", 0, 2), _obj(6 * MIB))
    with pytest.raises(TierFullError):
        store.put("ns", layout.shard_key(2, "a", 1, 2), _obj(6 * MIB))  # step 2 alone is 12 MiB
    assert [k for k, _, _ in store.listing("ns", "")] == [
        layout.shard_key(1, "a", 0, 1),
        layout.shard_key(2, "a", 0, 2),
    ]
    assert store.used == 10 * MIB


def test_the_newest_committed_step_not_yet_uploaded_is_kept_over_a_new_step() -> None:
    store = TierStore(10 * MIB)
    store.put("ns", layout.shard_key(1, "a", 0, 1), _obj(6 * MIB))
    store.put("ns", layout.commit_key(1), _obj(100))
    with pytest.raises(TierFullError):
        store.put("ns", layout.shard_key(2, "a", 0, 1), _obj(6 * MIB))
    assert store.get("ns", layout.commit_key(1)) is not None  # still the one restorable step
    for key in (layout.shard_key(1, "a", 0, 1), layout.commit_key(1)):
        store.mark_durable("ns", key)
    store.put("ns", layout.shard_key(2, "a", 0, 1), _obj(6 * MIB))  # once on the URI it may go
    assert store.get("ns", layout.commit_key(1)) is None
