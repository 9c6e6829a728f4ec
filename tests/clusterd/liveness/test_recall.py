"""Node health survives a clusterd restart: rebuilt from the restarts in the (real SQLite) store."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from clusterd.liveness.health import NodeHealth
from clusterd.liveness.recall import failures_of, recall
from clusterd.model.causes import Cause
from clusterd.model.spec import JobSpec
from clusterd.server import ClusterDaemon
from clusterd.slurm.types import NodeState
from clusterd.store.records import Phase, RestartEntry
from clusterd.store.store import sqlite_store

from ..conftest import USER_A, USER_B
from .test_detection import Live, live  # noqa: F401  (the fixture)
from .test_health import died_on_node2, hung_on_node2

NOW = time.time()
PROGRESS_HANG = (
    "1 of 2 ranks stopped advancing for 10.2s while beating; rank 1 on n2 at step 59\nstack of rank 1: on n9"
)

CUT_HANG = (
    "16 of 16 ranks stopped advancing for 10.2s while beating; "
    + ", ".join(f"rank {r} on n{r} at step 5" for r in range(8))
    + " (+8 more)"
)


def entry(
    cause: Cause, by: str, detail: str = "", nodes: tuple[str, ...] = (), before: int = 2, at: float = NOW
) -> RestartEntry:
    return RestartEntry(cause, nodes, at, 4, detail=detail, nodes_before=before, detected_by=by)


@pytest.mark.parametrize(
    ("restart", "pinned"),
    [
        (
            entry(Cause.NODE_FAILURE, "heartbeat+probe", nodes=("n2", "n3")),
            [("n2", "node death"), ("n3", "node death")],
        ),
        (entry(Cause.NODE_FAILURE, "slurm", nodes=("n2",)), []),  # not clusterd's own finding: never scored
        (entry(Cause.RANK_HUNG, "progress", PROGRESS_HANG), [("n2", "hang")]),  # the stack's text is not read
        (entry(Cause.RANK_HUNG, "heartbeat", "ranks 1,3 on n4 silent 31.0s (hang timeout 30s)"), [("n4", "hang")]),
        (entry(Cause.RANK_HUNG, "progress", PROGRESS_HANG, before=1), []),  # its run's only node
        (entry(Cause.RANK_FAILED, "rank-exit", "rank 1 on n2 exited with status 1"), []),  # the job's own code
        (  # cut after 8 ranks: the named nodes may be all of them, the others are unknown
            entry(Cause.RANK_HUNG, "progress", CUT_HANG, before=16),
            [],
        ),
    ],
)
def test_what_a_restart_pins_on_nodes(restart: RestartEntry, pinned: list[tuple[str, str]]) -> None:
    found = failures_of(7, "7", "alice", restart)
    assert [(f.node, f.kind) for f in found] == pinned
    assert all(f.evidence == (f.kind == "node death") for f in found)


async def test_restarts_within_the_window_are_recalled_from_the_store(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path / "db.sqlite3")
    await store.open()
    try:
        for user, job_id, restart in (
            ("alice", "5", entry(Cause.RANK_HUNG, "progress", PROGRESS_HANG, at=NOW - 300)),
            ("bob", "6", entry(Cause.NODE_FAILURE, "heartbeat+probe", nodes=("n2",), at=NOW - 200)),
            ("bob", "7", entry(Cause.NODE_FAILURE, "heartbeat+probe", nodes=("n2",), at=NOW - 7200)),  # too old
        ):
            rec, _ = await store.jobs.reserve(user, f"r{job_id}", JobSpec(command=["x"], nodes=2))
            rec.phase, rec.job_id = Phase.SUBMITTED, job_id
            await store.jobs.save(rec)
            await store.jobs.record_restart(rec, restart)
    finally:
        await store.close()
    store = sqlite_store(tmp_path / "db.sqlite3")  # clusterd started again
    await store.open()
    try:
        health = NodeHealth(window_seconds=3600)
        assert await recall(health, store.jobs, now=NOW) == 2
    finally:
        await store.close()
    assert health.summary("n2") == "failed 2 jobs (1 hang, 1 node death); suspect"
    assert health.drained() == []  # recalled failures drain nothing by themselves: Slurm says what was drained


async def test_a_restarted_clusterd_knows_the_node_it_drained_and_its_failures(live: Live) -> None:  # noqa: F811
    """The real path: a hang and a confirmed death drain node2; a new clusterd on the same store and
    Slurm finds the record, and that node2 is drained by clusterd (its Slurm reason says so)."""
    live.daemon.detector.health._event = 0.0  # the test's failures come seconds apart
    await hung_on_node2(live, USER_A)
    await died_on_node2(live, USER_B)
    assert live.daemon.detector.health.drained() == ["node2"]
    again = ClusterDaemon(live.daemon.config, backend=live.slurm)
    await again.start()
    try:
        await again.poller.poll_once()
        await again.detector.check_once()
        summary = again.detector.health.summary("node2")
        assert summary == "failed 2 jobs (1 hang, 1 node death); drained by clusterd", summary
        # Resumed meanwhile (its probe, or an operator): the record starts anew at the first look.
        live.slurm.nodes = [replace(n, state=NodeState.IDLE, reason="") for n in live.slurm.nodes]
        config = live.daemon.config
        config = replace(config, liveness=replace(config.liveness, health_event_seconds=0.001))
        third = ClusterDaemon(config, backend=live.slurm)
        await third.start()
        try:
            await third.poller.poll_once()
            await third.detector.check_once()
            assert third.detector.health.summary("node2") == ""
        finally:
            await third.stop()
    finally:
        await again.stop()


async def test_recalling_again_adds_nothing_and_skips_failures_before_a_return(tmp_path: Path) -> None:
    """A leadership gained recalls again: failures already known, or older than the node's last return
    to service (its probe passed), are left out."""
    store = sqlite_store(tmp_path / "db.sqlite3")
    await store.open()
    try:
        for job_id, at in (("5", NOW - 300), ("6", NOW - 200)):
            rec, _ = await store.jobs.reserve("bob", f"r{job_id}", JobSpec(command=["x"], nodes=2))
            rec.phase, rec.job_id = Phase.SUBMITTED, job_id
            await store.jobs.save(rec)
            await store.jobs.record_restart(rec, entry(Cause.NODE_FAILURE, "heartbeat+probe", nodes=("n2",), at=at))
        health = NodeHealth(window_seconds=3600)
        await recall(health, store.jobs, now=NOW)
        await recall(health, store.jobs, now=NOW)
        assert health.summary("n2") == "failed 2 jobs (2 node death); suspect"
        health.returned("n2")
        await recall(health, store.jobs, now=NOW)
        assert health.summary("n2").startswith("returned to service at ")
    finally:
        await store.close()


async def test_a_new_leader_probes_the_nodes_the_old_one_drained(live: Live) -> None:  # noqa: F811
    """Adoption of clusterd's own drains happens again at each leadership gained (not only at start)."""
    detector = live.daemon.detector
    await live.daemon.poller.poll_once()
    await detector.check_once()  # the first look: nothing drained
    live.slurm.nodes = [
        replace(n, state=NodeState.DRAINED, reason="clusterd: failed 2 jobs of 2 users") if n.name == "node3" else n
        for n in live.slurm.nodes
    ]
    live.daemon.poller.hurry(5.0)  # nodes are read again now, not at the next slow node read
    await live.daemon.poller.poll_once()
    await detector.check_once()
    assert detector.health.drained() == []  # another leader drained it: not looked at again
    await live.daemon._lead()
    await detector.check_once()
    assert detector.health.drained() == ["node3"]
