"""The create-only probe that clusterd check and the checkpoint manager share."""

from __future__ import annotations

from clusterctl.storage import MemoryStorage
from clusterctl.storage.base import Buffer
from clusterctl.storage.conditional import create_only_refusal


class IgnoresIfNoneMatch(MemoryStorage):
    """A store whose create-only put overwrites, as a server that ignores If-None-Match: *."""

    def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
        super().put(key, data)


def test_a_store_that_refuses_the_second_put_passes_and_keeps_nothing() -> None:
    store = MemoryStorage()
    assert create_only_refusal(store, "probe/x") is None
    assert store.list_objects("") == []


def test_a_store_that_overwrites_is_named_and_keeps_nothing() -> None:
    store = IgnoresIfNoneMatch()
    refusal = create_only_refusal(store, "probe/x")
    assert refusal is not None and "412" in refusal
    assert store.list_objects("") == []
