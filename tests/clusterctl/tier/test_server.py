"""The tier server under hostile callers and faulty peers: logins bounded, bad requests refused,
refused puts never leave a connection or a copy behind."""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from clusterctl.checkpoint import layout
from clusterctl.tier import TierClient, TierError, TierServer, TierSettings
from clusterctl.tier.wire import client_handshake

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # no tracebacks
JOB = "job-7"
SECRET = secrets.token_bytes(32)


def _client(address: str) -> TierClient:
    return TierClient(address, secret=SECRET, job=JOB, timeout=5.0)


def _where(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def tier() -> Iterator[TierServer]:
    server = TierServer(TierSettings(JOB, SECRET, replicas=0, upload=False, max_logins=4, login_timeout=0.5)).start()
    yield server
    server.close()


def _serving_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "tier-conn" or t.name.endswith("(_serve)"))


def test_silent_callers_hold_at_most_max_logins_threads_and_only_for_the_login_timeout(
    tier: TierServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "clusterctl.tier")
    socket.create_connection(_where(tier.address)).close()  # a caller that hangs up mid-login
    time.sleep(0.1)
    silent = [socket.create_connection(_where(tier.address)) for _ in range(20)]
    try:
        time.sleep(0.3)
        assert _serving_threads() <= 4  # not one thread per caller
        extra = silent[-1]
        extra.settimeout(2)
        assert extra.recv(64) == b""  # beyond the cap: closed at once, no nonce sent
        deadline = time.monotonic() + 5  # silent logins end after the login timeout; a rank then gets in
        while True:
            try:
                assert _client(tier.address).list("ns", "") == []
                break
            except TierError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
    finally:
        for s in silent:
            s.close()
    time.sleep(0.3)
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 2  # 21 refusals, no log flood


def test_the_accept_loop_survives_a_thread_that_cannot_start(tier: TierServer, monkeypatch: pytest.MonkeyPatch) -> None:
    real = threading.Thread
    failures = {"left": 1}

    class NoThread(real):  # type: ignore[misc,valid-type]
        def start(self) -> None:
            if getattr(self, "_target", None) is not None and self._target.__name__ == "_serve" and failures["left"]:
                failures["left"] -= 1
                raise RuntimeError("can't start new thread")
            super().start()

    monkeypatch.setattr(threading, "Thread", NoThread)
    assert _client(tier.address).list("ns", "") == []  # its first connection was dropped, a retry got in
    assert failures["left"] == 0 and tier._logins == 0


def test_bad_keys_and_offsets_are_refused_and_the_connection_serves_on(tier: TierServer) -> None:
    client = _client(tier.address)
    client.put("ns", "a/b", b"hello")
    with pytest.raises(Exception, match="key"):
        client.delete("ns", ["../etc/passwd"])
    with pytest.raises(Exception, match="keys must be a list"):
        client._call({"op": "delete", "ns": "ns", "keys": "a/b"})
    with pytest.raises(Exception, match="prefix"):
        client.list("ns", "/abs")
    with pytest.raises(Exception, match="offset and length"):
        client._call({"op": "get", "ns": "ns", "key": "a/b", "offset": "1"})
    assert client.get("ns", "a/b") == b"hello"


def test_a_refused_put_never_leaves_a_pooled_connection_out_of_step(tier: TierServer) -> None:
    client = _client(tier.address)
    with pytest.raises(Exception, match="key"):
        client.put("ns", "../x", bytes(100_000))  # refused before its payload was read
    client.put("ns", "a/b", b"next")  # not "closed mid-frame"
    assert client.get("ns", "a/b") == b"next"
    sock = socket.create_connection(_where(tier.address))
    chan = client_handshake(sock, SECRET, JOB, tier.address)
    chan.send({"op": "put", "ns": "ns", "key": "../x", "size": 4, "digest": None}, b"abcd")
    assert "error" in chan.recv_header()
    sock.settimeout(5)
    assert sock.recv(1) == b""  # the tier closes the link instead of reading the payload as a frame
    chan.close()


def test_a_put_short_of_replicas_leaves_no_copy_on_the_peers_that_took_one() -> None:
    peer = TierServer(TierSettings(JOB, SECRET, replicas=0, upload=False)).start()
    tier = TierServer(TierSettings(JOB, SECRET, peers=(peer.address, "127.0.0.1:1"), replicas=2, upload=False)).start()
    try:
        with pytest.raises(Exception, match="only 1 of 2 peer tiers"):
            _client(tier.address).put("ns", layout.shard_key(1, "r", 0, 1), b"abc")
        assert tier.store.listing("ns", "") == [] and peer.store.listing("ns", "") == []
    finally:
        tier.close()
        peer.close()


def test_a_rank_gets_in_once_a_login_slot_frees() -> None:
    server = TierServer(TierSettings(JOB, SECRET, replicas=0, upload=False, max_logins=1, login_timeout=0.5)).start()
    try:
        with socket.create_connection(_where(server.address)):  # holds the only login slot, silently
            time.sleep(0.1)
            assert _client(server.address).list("ns", "") == []  # turned away at first, then let in
    finally:
        server.close()
