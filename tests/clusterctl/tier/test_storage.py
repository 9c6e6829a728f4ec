"""Restores fall back past a process squatting the tier's port, list from memory at once while the
URI hangs, and a failed parallel read leaves nothing writing into the caller's buffer."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from clusterctl.storage import MemoryStorage, ObjectInfo, StorageError
from clusterctl.tier import ChainStorage, TierClient, TierStorage, TierUnavailableError, storage, wire
from tests.support.wait import wait_for

JOB = "job-9"
SECRET = secrets.token_bytes(32)


@pytest.fixture(params=[{"nonce": "not hex"}, {"nonce": secrets.token_hex(16)}])
def squatter(request: pytest.FixtureRequest) -> Iterator[str]:
    """A process on the tier's port answering junk: a bad nonce, or a bad proof after a good one."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def answer() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                wire._write_plain(conn, request.param)
                try:
                    wire._read_plain(conn)
                    wire._write_plain(conn, {"proof": "zz-not-hex"})
                except Exception:
                    pass

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    server.close()


def test_a_squatter_answering_junk_makes_restore_read_the_uri(squatter: str) -> None:
    uri = MemoryStorage()
    uri.put("steps/1/x", b"from the uri")
    chain = ChainStorage(TierStorage(TierClient(squatter, secret=SECRET, job=JOB, timeout=5), [], "ns"), uri)
    try:
        assert chain.get("steps/1/x") == b"from the uri"
        out = bytearray(4)
        chain.read_into("steps/1/x", memoryview(out), offset=5)
        assert bytes(out) == b"the "
        assert [o.key for o in chain.list_objects("steps/")] == ["steps/1/x"]
    finally:
        chain.tiers.close()
        chain.close()


class _Pieces:
    """A source whose first piece fails at once while the others are still being read."""

    address = "fake:1"

    def read_into(self, ns: str, key: str, out: memoryview, *, offset: int = 0) -> None:
        if offset == 0:
            raise TierUnavailableError("link reset")
        time.sleep(0.2)
        out[:] = b"\xff" * len(out)

    def close(self) -> None:
        pass


def test_a_failed_parallel_read_returns_only_once_every_piece_has_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "READ_PIECE", 4)
    reader = TierStorage(_Pieces(), [], "ns", concurrency=4)  # type: ignore[arg-type]
    out = bytearray(16)
    try:
        with pytest.raises(Exception, match="link reset"):
            reader.read_into("steps/1/x", memoryview(out))
        seen = bytes(out)
        time.sleep(0.4)
        assert bytes(out) == seen  # nothing lands in the caller's buffer after the read returned
    finally:
        reader.close()


class _HungListing(MemoryStorage):
    """A URI whose listings hang until ``thaw`` is set (S3 stopped with SIGSTOP)."""

    def __init__(self) -> None:
        super().__init__()
        self.thaw = threading.Event()
        self.listings = 0

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        self.listings += 1
        self.thaw.wait(10)
        return super().list_objects(prefix)


def test_while_the_uri_hangs_listings_wait_for_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _HungListing()
    uri.put("steps/1/x", b"on the uri")
    tiers = TierStorage(TierClient("127.0.0.1:1", secret=SECRET, job=JOB, timeout=5), [], "ns")
    monkeypatch.setattr(tiers, "list_objects", lambda prefix: [])
    chain = ChainStorage(tiers, uri, list_timeout=0.3)
    try:
        started = time.monotonic()
        assert chain.list_objects("steps/") == []
        assert time.monotonic() - started >= 0.3
        assert chain.list_objects("steps/") == []  # the first listing still hangs: not waited for again
        assert uri.listings == 1
        uri.thaw.set()
        wait_for(lambda: [o.key for o in chain.list_objects("steps/")] == ["steps/1/x"], 5, 0.05, what="the uri")
    finally:
        chain.close()


def test_a_hung_uri_is_waited_for_per_prefix_and_never_read_as_no_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _HungListing()
    tiers = TierStorage(TierClient("127.0.0.1:1", secret=SECRET, job=JOB, timeout=5), [], "ns")
    chain = ChainStorage(tiers, uri, list_timeout=0.2)
    try:
        monkeypatch.setattr(tiers, "list_objects", lambda prefix: [])
        assert chain.list_objects("steps/") == []
        assert chain.list_objects("commits/") == []  # another prefix is asked, not skipped for the first one's hang
        assert uri.listings == 2
        monkeypatch.undo()  # the tier is unreachable too: that is no answer, not an empty job
        with pytest.raises(StorageError, match="neither the memory tiers"):
            chain.list_objects("steps/")
        with pytest.raises(StorageError, match="neither the memory tiers"):
            chain.list_objects("other/")
    finally:
        uri.thaw.set()
        chain.close()
