"""The create-only probe that clusterd check and the checkpoint manager share."""

from __future__ import annotations

from clusterctl.storage import MemoryStorage
from clusterctl.storage.base import Buffer
from clusterctl.storage.conditional import create_only_refusal


class IgnoresIfNoneMatch(MemoryStorage):
    """A store whose create-only put overwrites, as a server that ignores If-None-Match: *."""

    def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
        super().put(key, data)


class RetriesAfterALostReply(MemoryStorage):
    """A store whose first create-only put lands but whose reply is lost, so the retry gets 412."""

    def __init__(self) -> None:
        super().__init__()
        self.lost_first_reply = False

    def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
        if not self.lost_first_reply:
            self.lost_first_reply = True
            super().put(key, data, if_absent=if_absent)
        super().put(key, data, if_absent=if_absent)


def test_a_retried_first_put_refused_as_existing_counts_as_created() -> None:
    store = RetriesAfterALostReply()
    assert create_only_refusal(store, "probe/x") is None
    assert store.list_objects("") == []


def test_a_store_that_refuses_the_second_put_passes_and_keeps_nothing() -> None:
    store = MemoryStorage()
    assert create_only_refusal(store, "probe/x") is None
    assert store.list_objects("") == []


def test_a_store_that_overwrites_is_named_and_keeps_nothing() -> None:
    store = IgnoresIfNoneMatch()
    refusal = create_only_refusal(store, "probe/x")
    assert refusal is not None and "412" in refusal
    assert store.list_objects("") == []
