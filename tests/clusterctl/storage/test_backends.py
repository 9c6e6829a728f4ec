"""The Storage contract, run against every backend (memory, POSIX, real SeaweedFS S3)."""

from __future__ import annotations

import os

import pytest

from clusterctl.storage import (
    InvalidKeyError,
    ObjectExistsError,
    ObjectNotFoundError,
    Storage,
    StorageError,
)


def test_put_get_stat_list_delete(storage: Storage) -> None:
    storage.put("a/b/one.bin", b"hello")
    storage.put("a/two.bin", bytearray(b"world!"))
    storage.put("c/three", memoryview(b"xyz"))
    assert storage.get("a/b/one.bin") == b"hello"
    assert storage.stat("a/two.bin").size == 6
    assert [o.key for o in storage.list_objects("a/")] == ["a/b/one.bin", "a/two.bin"]
    assert [o.key for o in storage.list_objects("")] == ["a/b/one.bin", "a/two.bin", "c/three"]
    assert [o.key for o in storage.list_objects("a/t")] == ["a/two.bin"]
    assert storage.list_objects("nothing/") == []
    storage.delete(["a/b/one.bin", "does/not/exist"])
    assert [o.key for o in storage.list_objects("a/")] == ["a/two.bin"]
    with pytest.raises(ObjectNotFoundError):
        storage.get("a/b/one.bin")
    with pytest.raises(ObjectNotFoundError):
        storage.stat("a/b/one.bin")


def test_overwrite_and_empty_object(storage: Storage) -> None:
    storage.put("k", b"first")
    storage.put("k", b"")
    assert storage.get("k") == b""
    assert storage.stat("k").size == 0


def test_create_only_put(storage: Storage) -> None:
    storage.put("commits/1.json", b"{}", if_absent=True)
    with pytest.raises(ObjectExistsError):
        storage.put("commits/1.json", b"{other}", if_absent=True)
    assert storage.get("commits/1.json") == b"{}"


def test_large_object_parallel_parts_round_trip(storage: Storage) -> None:
    data = os.urandom((12 << 20) + 12345)  # > 2 parts of 5 MiB (S3) and many of 1 MiB (POSIX)
    storage.put("big/shard", data)
    assert storage.stat("big/shard").size == len(data)
    out = bytearray(len(data))
    storage.read_into("big/shard", memoryview(out))
    assert out == data
    window = bytearray(1000)
    storage.read_into("big/shard", memoryview(window), offset=(6 << 20) - 10)
    assert window == data[(6 << 20) - 10 : (6 << 20) + 990]
    assert storage.list_incomplete("big/") == []


def test_large_create_only_put(storage: Storage) -> None:
    data = os.urandom(11 << 20)
    storage.put("big/once", data, if_absent=True)
    with pytest.raises(ObjectExistsError):
        storage.put("big/once", data, if_absent=True)


def test_read_past_end_is_an_error(storage: Storage) -> None:
    storage.put("small", b"12345")
    with pytest.raises(StorageError):
        storage.read_into("small", memoryview(bytearray(10)))


def test_get_max_size(storage: Storage) -> None:
    storage.put("m", b"x" * 100)
    with pytest.raises(StorageError):
        storage.get("m", max_size=10)
    assert storage.get("m", max_size=100) == b"x" * 100


@pytest.mark.parametrize(
    "key", ["../escape", "a/../../b", "/abs", "a//b", "a\\b", "a/\x00b", "a/\nb", "", ".", "a/./b"]
)
def test_unsafe_keys_refused(storage: Storage, key: str) -> None:
    with pytest.raises(InvalidKeyError):
        storage.put(key, b"x")
    with pytest.raises(InvalidKeyError):
        storage.get(key)


def test_prefix_listing_refuses_traversal(storage: Storage) -> None:
    with pytest.raises(InvalidKeyError):
        storage.list_objects("../")
