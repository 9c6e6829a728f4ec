"""The memory tier with real torch state: saves commit on replicas in memory, restores fall back
memory -> peer -> URI, uploads follow in the background, and the tier refuses other jobs' callers.

Tiers run as real processes (``python -m clusterctl.tier``) on loopback where the test only talks to
them; in-thread servers where the test must reach into one's memory (corruption) or its URI (outage).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from clusterctl.checkpoint import CheckpointConfig, CheckpointManager, layout
from clusterctl.cli import checkpoints
from clusterctl.cli.checkpoints import register
from clusterctl.storage import MemoryStorage, StorageUnavailableError
from clusterctl.tier import (
    TierAuthError,
    TierClient,
    TierFullError,
    TierProcess,
    TierServer,
    TierSettings,
    TierStorage,
    spawn_tier,
    wire,
)
from clusterctl.tier.process import ENV_ADDR, ENV_JOB, ENV_PEERS, ENV_SECRET
from clusterctl.tier.wire import Channel, client_handshake

WORKER = str(Path(__file__).with_name("tier_worker.py"))
JOB = "job-41"
SECRET = secrets.token_bytes(32)
CONFIG = CheckpointConfig(commit_timeout=30.0, gc_on_commit=False)


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 64)).sum().backward()
    opt.step()
    return model, opt


def _fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def _use(monkeypatch: pytest.MonkeyPatch, local: str, peers: list[str], secret: bytes = SECRET) -> None:
    monkeypatch.setenv(ENV_ADDR, local)
    monkeypatch.setenv(ENV_PEERS, ",".join(peers))
    monkeypatch.setenv(ENV_JOB, JOB)
    monkeypatch.setenv(ENV_SECRET, secret.hex())


def _client(address: str, secret: bytes = SECRET, job: str = JOB) -> TierClient:
    return TierClient(address, secret=secret, job=job, timeout=5.0)


@pytest.fixture
def servers() -> Iterator[list[TierServer]]:
    """Three in-thread tiers of JOB, each replicating once to the next, uploading to one URI."""
    uri = MemoryStorage()
    made = [
        TierServer(
            TierSettings(JOB, SECRET, replicas=1, handoff_delay=0.2, retry_max=0.1), opener=lambda ns: uri
        ).start()
        for _ in range(3)
    ]
    for i, s in enumerate(made):
        s._peers = [made[(i + 1) % 3].address, made[(i + 2) % 3].address]
    made[0].uri = uri  # type: ignore[attr-defined]
    yield made
    for s in made:
        s.close()


def test_save_commits_in_peer_memory_then_restores_from_a_peer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiers = [spawn_tier(job=JOB, secret=SECRET, replicas=1) for _ in range(3)]
    try:
        a, b, c = (t.address for t in tiers)
        for t, peers in zip(tiers, ([b, c], [c, a], [a, b]), strict=True):
            _client(t.address).configure(peers, 1)
        _use(monkeypatch, a, [b, c])
        uri = str(tmp_path / "ckpt")
        model, opt = _model()
        with CheckpointManager(uri, rank=0, world_size=1, config=CONFIG, tier="memory") as ckpt:
            assert ckpt.save(7, {"model": model, "optim": opt}).result().committed
            held = [_client(x).status(uri)["steps"] for x in (a, b, c)]
            assert held[0]["7"]["committed"] and held[1]["7"]["committed"]  # own copy + one replica
            assert "7" not in held[2]
            assert ckpt.wait_durable(timeout=30) == 7
            assert ckpt.durable_steps() == [7]
        tiers[0].stop()  # node a loses its memory; a fresh, empty tier takes its place
        tiers[0] = spawn_tier(job=JOB, secret=SECRET, replicas=1)
        fresh = tiers[0].address
        for path in sorted((tmp_path / "ckpt").rglob("*"), reverse=True):  # the URI is gone too
            path.unlink() if path.is_file() else path.rmdir()
        _use(monkeypatch, fresh, [b, c])
        model2, opt2 = _fresh()
        with CheckpointManager(uri, rank=0, world_size=1, config=CONFIG, tier="memory") as ckpt:
            assert ckpt.restore(into={"model": model2, "optim": opt2}) == 7  # a is empty, the URI gone: from b
        for p, q in zip(model.parameters(), model2.parameters(), strict=True):
            assert torch.equal(p, q)
        assert opt2.state_dict()["state"][0]["exp_avg"].equal(opt.state_dict()["state"][0]["exp_avg"])
    finally:
        for t in tiers:
            t.stop()


def _ranks(spec: dict[str, object], tiers: list[TierProcess], world: int = 2) -> list[dict[str, object]]:
    """Run ``world`` ranks, rank r on "node" r: its own tier first, the others as peers."""
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(world),
            "SLURM_JOB_ID": "4242",
            "SLURM_STEP_ID": "0",
            ENV_ADDR: tiers[rank].address,
            ENV_PEERS: ",".join(t.address for t in tiers if t is not tiers[rank]),
            ENV_JOB: JOB,
            ENV_SECRET: SECRET.hex(),
        }
        procs.append(
            subprocess.Popen([sys.executable, WORKER, json.dumps(spec)], env=env, stdout=subprocess.PIPE, text=True)
        )
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=120)
        assert p.returncode == 0, stdout
        out.append(json.loads(stdout.splitlines()[-1]))
    return out


def test_two_ranks_commit_across_tiers_and_resume_from_the_survivor(tmp_path: Path) -> None:
    tiers = [spawn_tier(job=JOB, secret=SECRET, replicas=1) for _ in range(2)]
    try:
        for t, other in zip(tiers, reversed(tiers), strict=True):
            _client(t.address).configure([other.address], 1)
        uri = str(tmp_path / "ckpt")
        assert _ranks({"uri": uri, "save": [1, 2]}, tiers) == [{"step": 2, "committed": True}] * 2
        tiers[0].stop()  # node 0 dies with its memory; the URI is unreachable (gone)
        tiers[0] = spawn_tier(job=JOB, secret=SECRET, replicas=1)
        _client(tiers[1].address).configure([tiers[0].address], 1)
        (tmp_path / "ckpt").rename(tmp_path / "away")
        done = _ranks({"uri": uri}, tiers)
        # tier 0 is empty and the URI gone: rank 0's shard came from the survivor's replica
        assert [(d["restored"], d["same"]) for d in done] == [(2, True), (2, True)]
    finally:
        for t in tiers:
            t.stop()


def test_a_corrupt_peer_copy_is_skipped_for_the_next_source(servers: list[TierServer]) -> None:
    a, b, c = servers
    c._replicas = 0
    data = secrets.token_bytes(3 << 20)
    key = layout.shard_key(3, "run", 0, 1)
    _client(b.address).put("ns", key, data)  # b's copy + a replica on c
    copy = b.store.get("ns", key)
    assert copy is not None and c.store.get("ns", key) is not None
    copy.data[(2 << 20) + 5] ^= 0xFF  # memory of b flips a bit
    reader = TierStorage(_client(a.address), [_client(b.address), _client(c.address)], "ns")
    out = bytearray(1 << 20)
    reader.read_into(key, memoryview(out), offset=2 << 20)
    assert bytes(out) == data[2 << 20 : 3 << 20]  # a holds none and b's is corrupt: c's copy
    c.store.get("ns", key).data[0] ^= 0xFF  # type: ignore[union-attr]
    with pytest.raises(Exception, match="no good copy"):
        reader.get(key)


def test_saves_commit_while_the_uri_is_down_and_go_up_once_it_is_back(
    servers: list[TierServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, _ = servers
    uri: MemoryStorage = a.uri  # type: ignore[attr-defined]
    down = {"on": True}

    def outage(op: str, key: str) -> None:
        if down["on"]:
            raise StorageUnavailableError("S3 frozen")

    uri.fault = outage
    _use(monkeypatch, a.address, [b.address])
    model, opt = _model()
    with CheckpointManager("memory://x", rank=0, world_size=1, config=CONFIG, storage=uri, tier="memory") as ckpt:
        for step in (1, 2):
            assert ckpt.save(step, {"model": model, "optim": opt}).result().committed
        with pytest.raises(TimeoutError):
            ckpt.wait_durable(timeout=0.5)
        assert ckpt.steps() == [1, 2]  # from memory: the URI does not answer
        down["on"] = False
        assert ckpt.wait_durable(timeout=30) == 2
        assert ckpt.wait_durable(1, timeout=30) == 1  # each step's retries keep their own clock
        assert ckpt.durable_steps() == [1, 2]


def test_the_tier_refuses_wrong_secrets_other_jobs_and_impostors(servers: list[TierServer]) -> None:
    a = servers[0]
    with pytest.raises(TierAuthError):
        _client(a.address, secret=secrets.token_bytes(32)).list("ns", "")
    other = secrets.token_bytes(32)  # another job's valid credentials
    with pytest.raises(TierAuthError):
        _client(a.address, secret=other, job="job-99").list("ns", "")
    with socket.create_server(("127.0.0.1", 0)) as squat:  # a process squatting a tier's port
        port = squat.getsockname()[1]
        done = threading.Thread(target=_accept_anything, args=(squat,), daemon=True)
        done.start()
        with pytest.raises(TierAuthError, match="not a tier of this job"):
            _client(f"127.0.0.1:{port}").put("ns", layout.commit_key(1), b"{}")
        done.join(5)
    sock = socket.create_connection(tuple(a.address.rsplit(":", 1)))  # type: ignore[arg-type]
    chan = client_handshake(sock, SECRET, JOB, a.address)
    forged = Channel(sock, b"x" * 32, is_server=False)  # frames MAC'd with a key not derived from the secret
    forged.send({"op": "delete", "ns": "ns", "keys": ["commits/000000000001.json"], "propagate": True})
    sock.settimeout(5)
    assert sock.recv(1) == b""  # the tier drops the connection
    chan.close()


def test_a_bare_probe_of_the_port_ends_quietly(servers: list[TierServer], monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's start-up waits for its tiers by connecting and closing: no thread may die of it."""
    died: list[object] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    host, port = servers[0].address.rsplit(":", 1)
    socket.create_connection((host, int(port))).close()
    with socket.create_connection((host, int(port))) as half:
        half.sendall(b"\x00\x00")  # half a length prefix
    for thread in [t for t in threading.enumerate() if "_serve" in t.name and t.ident is not None]:
        thread.join(5)
    assert _client(servers[0].address).list("ns", "") == []
    assert not died


def _accept_anything(server: socket.socket) -> None:
    """A fake tier that does not know the secret and claims any caller is welcome."""
    conn, _ = server.accept()
    with conn:
        wire._write_plain(conn, {"nonce": secrets.token_hex(16)})
        wire._read_plain(conn)
        wire._write_plain(conn, {"proof": secrets.token_hex(32)})
        conn.recv(1)


def test_a_step_over_the_memory_cap_is_refused_and_old_steps_are_dropped_first() -> None:
    tier = TierServer(TierSettings(JOB, SECRET, replicas=0, cap_bytes=10 << 20, upload=False)).start()
    try:
        client = _client(tier.address)
        for step in (1, 2, 3):
            client.put("ns", layout.shard_key(step, "r", 0, 1), bytes(4 << 20))
        assert sorted(tier.status("ns")["steps"]) == ["2", "3"]  # step 1 made room for step 3
        with pytest.raises(TierFullError, match=r"step 4 needs 12582912 bytes .* cap of 10485760"):
            for rank in (0, 1):  # two shards of one step, 6 MiB each, on one node
                client.put("ns", layout.shard_key(4, "r", rank, 2), bytes(6 << 20))
        assert tier.store.used <= 10 << 20
    finally:
        tier.close()


def test_a_put_fails_when_fewer_peers_than_replicas_answer() -> None:
    tier = TierServer(TierSettings(JOB, SECRET, peers=("127.0.0.1:1",), replicas=1, upload=False)).start()
    try:
        with pytest.raises(Exception, match="only 0 of 1 peer tiers"):
            _client(tier.address).put("ns", layout.shard_key(1, "r", 0, 1), b"abc")
        assert tier.store.listing("ns", "") == []
    finally:
        tier.close()


def test_checkpoints_list_shows_where_each_step_lives(
    servers: list[TierServer], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _ = servers
    for s in servers:  # this test's URI is a directory, not the fixture's shared memory store
        s.uploader = None
    _use(monkeypatch, a.address, [b.address])
    uri = str(tmp_path / "ckpt")
    model, opt = _model()
    with CheckpointManager(uri, rank=0, world_size=1, config=CONFIG, storage=MemoryStorage(), tier="memory") as ckpt:
        ckpt.save(5, {"model": model, "optim": opt}).result()
    parser = argparse.ArgumentParser(prog="clusterctl")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["checkpoints", "list", uri, "--json"])
    assert args.func(args) == 0
    (row,) = json.loads(capsys.readouterr().out)["steps"]
    assert (row["step"], row["durable"], row["world_size"]) == (5, False, 1)
    assert sorted(row["memory"]) == sorted([a.address, b.address])

    hung = threading.Event()  # the URI down (S3 stopped): its LIST never answers
    frozen = MemoryStorage()
    monkeypatch.setattr(frozen, "list_objects", lambda prefix: hung.wait(30) and [])
    monkeypatch.setattr(checkpoints, "_open", lambda uri: frozen)
    monkeypatch.setattr(checkpoints, "URI_WAIT", 0.3)
    try:
        assert args.func(args) == 0
        out, err = capsys.readouterr()
        (row,) = json.loads(out)["steps"]
        assert (row["step"], row["durable"], row["world_size"]) == (5, None, 1) and "did not answer in 0.3 s" in err
    finally:
        hung.set()


def test_an_object_larger_than_the_cap_is_refused_before_it_is_read() -> None:
    tier = TierServer(TierSettings(JOB, SECRET, replicas=0, cap_bytes=1 << 20, upload=False)).start()
    try:
        with pytest.raises(TierFullError, match="more than the tier's cap"):
            _client(tier.address).put("ns", layout.shard_key(1, "r", 0, 1), bytes(2 << 20))
        assert tier.store.used == 0
    finally:
        tier.close()


def test_outside_a_tiered_job_the_manager_runs_a_tier_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (ENV_ADDR, ENV_PEERS, ENV_JOB, ENV_SECRET):
        monkeypatch.delenv(name, raising=False)
    model, opt = _model()
    ckpt = CheckpointManager(str(tmp_path), rank=0, world_size=1, config=CONFIG, tier="memory")
    assert ckpt._tier is not None and ckpt._tier.own is not None
    own = ckpt._tier.own.proc
    ckpt.save(3, {"model": model, "optim": opt}).result()
    ckpt.close()  # returns once step 3 is on the URI, then stops its tier
    assert own.poll() is not None
    model2, opt2 = _fresh()
    with CheckpointManager(str(tmp_path), rank=0, world_size=1, config=CONFIG) as plain:
        assert plain.restore(into={"model": model2, "optim": opt2}) == 3
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), model2.parameters(), strict=True))


def test_checkpoints_list_with_half_set_tier_variables_fails_cleanly_and_closes_its_storage(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from clusterctl.cli import checkpoints
    from clusterctl.cli.main import main

    closed: list[bool] = []

    class Uri(MemoryStorage):
        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(checkpoints, "_open", lambda uri: Uri())
    monkeypatch.setenv(ENV_ADDR, "127.0.0.1:1")
    monkeypatch.delenv(ENV_SECRET, raising=False)
    assert main(["checkpoints", "list", "memory://x"]) == 1
    assert ENV_SECRET in capsys.readouterr().err
    assert closed == [True]
