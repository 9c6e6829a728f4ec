"""Two clusterd replicas on PostgreSQL in front of the real Slurm, while their leader keeps dying.

8 clients submit with request ids and 20 watchers follow every event for a minute; meanwhile the
leader is SIGKILLed three times (and restarted, as systemd would) and once frozen with SIGSTOP for
longer than its lease. A 2-node training job loses a node right after one of the kills. Afterwards:
- every acknowledged request id is exactly one Slurm job (none lost, none duplicated);
- every watcher saw every logged event, in log order, with no gap and no duplicate, across its
  reconnections to the other replica (checked against one full replay of the log);
- the training job was requeued exactly once for its one failure, and finished.
"""

from __future__ import annotations

import collections
import json
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from clusterctl.v1 import jobs_pb2
from tests.support.postgres import SKIP_REASON, get_cluster
from tests.support.replicas import Replicas
from tests.support.stack import Stack
from tests.support.training import finished, train_spec
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

SECONDS = 60.0
CLIENTS = 8
WATCHERS = 20
EVERY, TOTAL = 20, 600  # the training job: checkpoint interval, steps of 0.1 s


@pytest.fixture
def replicas(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    cluster = get_cluster()
    if cluster is None:
        pytest.fail(SKIP_REASON)  # scripts/test.sh installs it: without it this proves nothing
    group = Replicas(stack, tmp_path_factory.mktemp("ha"), cluster.new_database())
    try:
        group.start()
        yield group
    finally:
        group.stop()


def _held_spec(tag: str, request_id: str) -> jobs_pb2.JobSpec:
    """A held one-node job named after its request id: Slurm's own queue tells how many exist."""
    return jobs_pb2.JobSpec(name=f"{tag}-{request_id}", command=["true"], request_id=request_id, hold=True)


class Submitter(threading.Thread):
    def __init__(self, replicas: Replicas, tag: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client = replicas.client("alice")
        self.tag = tag
        self.stop_at = stop
        self.acked: list[str] = []
        self.unacked: list[tuple[str, str]] = []

    def run(self) -> None:
        while not self.stop_at.is_set():
            request_id = uuid.uuid4().hex[:16]
            try:
                self.client.submit(_held_spec(self.tag, request_id))
                self.acked.append(request_id)
            except Exception as exc:
                self.unacked.append((request_id, repr(exc)))
            time.sleep(random.uniform(0.3, 0.9))


class Watcher(threading.Thread):
    """Follows every event of alice's jobs until it has seen log position ``target``."""

    def __init__(self, replicas: Replicas) -> None:
        super().__init__(daemon=True)
        self.client = replicas.client("alice")
        self.tokens: list[int] = []
        self.target: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for event in self.client.watch(include_initial=False):
                if event.resume_token:
                    self.tokens.append(int(event.resume_token))
                if self.target is not None and self.tokens and self.tokens[-1] >= self.target:
                    return
        except BaseException as exc:
            self.error = exc


def _slurm_names(stack: Stack, tag: str) -> collections.Counter[str]:
    out = stack.run("squeue", "-h", "-u", "alice", "-o", "%j", "--states=all").stdout
    return collections.Counter(n[len(tag) + 1 :] for n in out.split() if n.startswith(f"{tag}-"))


def test_leader_deaths_lose_and_duplicate_nothing(replicas: Replicas, stack: Stack, killed_nodes: list[str]) -> None:
    tag = f"ha{uuid.uuid4().hex[:6]}"
    try:
        _leader_deaths(replicas, stack, killed_nodes, tag)
    finally:  # ~800 held jobs and a training job: never left in the queue the next tests poll
        _cancel_tagged(stack, tag)


def _cancel_tagged(stack: Stack, tag: str) -> None:
    out = stack.run("squeue", "-h", "-u", "alice", "-o", "%i %j", check=False).stdout
    ids = [line.split()[0] for line in out.splitlines() if tag in line.split()[-1]]
    for start in range(0, len(ids), 200):
        stack.run("scancel", *ids[start : start + 200], check=False)


def _leader_deaths(replicas: Replicas, stack: Stack, killed_nodes: list[str], tag: str) -> None:
    stop = threading.Event()
    watchers = [Watcher(replicas) for _ in range(WATCHERS)]
    for w in watchers:
        w.start()
    time.sleep(1.0)  # subscribed before the first submit
    submitters = [Submitter(replicas, tag, stop) for _ in range(CLIENTS)]
    for s in submitters:
        s.start()

    client = replicas.client("alice")
    name = f"train-{tag}"
    job = client.submit(
        train_spec(stack, name, "--steps", str(TOTAL), "--every", str(EVERY), "--step-seconds", "0.1")
    ).job
    running = wait_for(
        lambda: (
            (j := client.get(job.job_id)).state == jobs_pb2.JOB_STATE_RUNNING and j.checkpoint_step >= EVERY - 1 and j
        ),
        timeout=120,
        what="first checkpoint",
    )
    victim = running.nodes[-1]

    t0 = time.monotonic()
    for kill in range(3):
        time.sleep(8.0)
        leader = replicas.leader()
        replicas.kill(leader, signal.SIGKILL)
        if kill == 1:  # a node dies while nobody leads: the next leader must still requeue the job
            killed_nodes.append(victim)
            stack.stack_sh("kill-node", victim)
        replicas.leader(other_than=leader)  # the survivor took over
        time.sleep(1.0)
        leader.start()  # restarted, as a follower
    time.sleep(4.0)
    frozen = replicas.leader()
    replicas.kill(frozen, signal.SIGSTOP)
    new = replicas.leader(other_than=frozen)
    time.sleep(replicas.lease_seconds * 2)
    replicas.kill(frozen, signal.SIGCONT)
    # The woken replica must see at once that it was deposed: one leader, and it is not the frozen one.
    wait_for(lambda: replicas.roles().count("leader") == 1, timeout=10, what="one leader after the freeze")
    assert replicas.leader() is new
    time.sleep(max(0.0, SECONDS - (time.monotonic() - t0)))
    stop.set()
    for s in submitters:
        s.join(30)

    # -- every acknowledged request id is exactly one Slurm job; no id is two
    acked = [r for s in submitters for r in s.acked]
    assert len(acked) > CLIENTS * 20, len(acked)
    deadline = time.monotonic() + 30  # squeue shows a just-accepted job a moment later
    while sum((names := _slurm_names(stack, tag)).values()) < len(acked) and time.monotonic() < deadline:
        time.sleep(0.5)
    lost = [r for r in acked if names[r] == 0]
    duplicated = {r: n for r, n in names.items() if n > 1}
    assert not lost and not duplicated, (
        f"{len(lost)} of {len(acked)} lost",
        _records(replicas.store_url, lost[:5]),
        duplicated,
    )
    assert sum(names.values()) <= len(acked) + sum(len(s.unacked) for s in submitters)

    # -- the training job: requeued once for its one failure, and done
    done = finished(replicas, job.job_id, timeout=400)  # type: ignore[arg-type]
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED, done
    assert len(done.restarts) == 1, done.restarts
    assert list(done.restarts[0].failed_nodes) == [victim]

    # -- watchers: the log's events of alice's jobs, in order, none missing, none twice
    reference = _logged(replicas.store_url)
    assert reference, "the event log is empty"
    for w in watchers:
        w.target = reference[-1]
    client.submit(_held_spec(tag, "sentinel"))  # one more event: a watcher at the end sees its target passed
    for w in watchers:
        w.join(60)
        assert not w.is_alive(), f"a watcher never saw event {reference[-1]}: it has {w.tokens[-3:]}"
        assert w.error is None, w.error
        assert w.tokens[: len(reference)] == reference, _first_difference(w.tokens, reference)


def _logged(url: str) -> list[int]:
    """Log positions of every event of alice's jobs, read from PostgreSQL itself."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT seq, record FROM events ORDER BY seq").fetchall()
    return [
        int(seq)
        for seq, record in rows
        if (record if isinstance(record, dict) else json.loads(record)).get("user") == "alice"
    ]


def _records(url: str, request_ids: list[str]) -> list[tuple[object, ...]]:
    """What the store says of ``request_ids`` (for a failure's message)."""
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT request_id, phase, job_id, state, observed->>'error', observed->>'final_reason' "
            "FROM jobs WHERE request_id = ANY(%s)",
            (request_ids,),
        ).fetchall()


def _first_difference(seen: list[int], logged: list[int]) -> str:
    i = next((i for i, (a, b) in enumerate(zip(seen, logged, strict=False)) if a != b), min(len(seen), len(logged)))
    return f"first difference at {i}: watcher {seen[max(0, i - 2) : i + 3]}, log {logged[max(0, i - 2) : i + 3]}"
