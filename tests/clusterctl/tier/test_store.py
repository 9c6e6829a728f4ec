"""The tier's memory cap: a refused put drops nothing, and the newest committed step that is not yet
on the URI is never dropped for a step still being written; a read's digests reuse those of put."""

from __future__ import annotations

import secrets

import pytest

from clusterctl.checkpoint import checksum, layout
from clusterctl.tier import TierCorruptError, TierFullError
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


def test_a_range_is_sent_with_the_digests_of_put_and_its_partial_ends_checked_here() -> None:
    data = bytearray(secrets.token_bytes(3 * MIB + 100))
    obj = StoredObject(data, chunk_digests(memoryview(data)), primary=True)
    pieces = obj.range_digests(MIB - 10, 2 * MIB + 60)  # 10 bytes of chunk 0, chunks 1 and 2, 50 of chunk 3
    assert [n for n, _ in pieces] == [10, MIB, MIB, 50]
    assert pieces[1:3] == [(MIB, obj.digests[1]), (MIB, obj.digests[2])]
    assert pieces[0][1] == checksum.digest(data[MIB - 10 : MIB]) and pieces[3][1] == checksum.digest(
        data[3 * MIB : 3 * MIB + 50]
    )
    assert obj.range_digests(3 * MIB, 100) == [(100, obj.digests[3])]  # the short last chunk is whole
    assert obj.range_digests(5, 0) == []
    data[0] ^= 1
    with pytest.raises(TierCorruptError, match="chunk 0"):
        obj.range_digests(MIB - 10, 20)  # a partial chunk is checked whole before its part is hashed
