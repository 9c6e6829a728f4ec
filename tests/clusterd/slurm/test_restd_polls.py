"""slurmrestd's GET jobs?update_time=: nothing when no job changed (23.11 on), the whole queue
otherwise, and never asked of an API that carries no last_update (22.05's v0.0.38)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.backends import Sent, SqueueFallback, answer, restd_backend

_JOB = {"job_id": 7, "name": "x", "user_name": "bob", "job_state": ["PENDING"]}
_UNSET = {"set": False, "infinite": False, "number": 0}


def _stamp(n: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": n}


async def test_update_time_asks_only_for_changes(tmp_path: Path) -> None:
    sent: list[str] = []
    replies = [
        {"jobs": [_JOB], "last_update": _stamp(1000), "errors": []},
        # Slurm 24.11's no-change answer: no jobs, last_update 0, a warning.
        {"jobs": [], "last_update": _stamp(0), "errors": [], "warnings": [{"description": "No job changes"}]},
        {"jobs": [], "last_update": _stamp(1010), "errors": []},  # a change: the queue emptied
    ]

    def handler(request: Sent) -> Any:
        sent.append(request.path)
        return answer(200, json=replies[len(sent) - 1])

    backend = restd_backend(tmp_path, handler, restd_api_version="v0.0.42")
    first = await backend.poll_jobs(frozenset())
    assert first.whole and [j.job_id for j in first.jobs] == ["7"]
    second = await backend.poll_jobs(frozenset())
    assert second.unchanged and not second.whole and second.jobs == ()
    third = await backend.poll_jobs(frozenset())
    assert third.whole and third.jobs == ()  # empty because the queue is, not "no change"
    assert sent == [
        "/slurm/v0.0.42/jobs",
        "/slurm/v0.0.42/jobs?update_time=1000",
        "/slurm/v0.0.42/jobs?update_time=1000",
    ]


async def test_a_304_on_jobs_is_unchanged(tmp_path: Path) -> None:
    """26.05 answers 304 (no body) when no job changed, as it does for nodes: not a failed poll."""
    sent: list[str] = []
    replies: list[Any] = [answer(200, json={"jobs": [_JOB], "last_update": _stamp(1000), "errors": []}), answer(304)]

    def handler(request: Sent) -> Any:
        sent.append(request.path)
        return replies[len(sent) - 1]

    backend = restd_backend(tmp_path, handler, restd_api_version="v0.0.45")
    assert (await backend.poll_jobs(frozenset())).whole
    second = await backend.poll_jobs(frozenset())
    assert second.unchanged and not second.whole and second.jobs == ()
    assert sent == ["/slurm/v0.0.45/jobs", "/slurm/v0.0.45/jobs?update_time=1000"]


async def test_without_last_update_every_poll_is_whole(tmp_path: Path) -> None:
    sent: list[str] = []

    def handler(request: Sent) -> Any:
        sent.append(request.path)
        return answer(200, json={"jobs": [], "errors": []})  # v0.0.38: no last_update

    backend = restd_backend(tmp_path, handler, restd_api_version="v0.0.38")
    for _ in range(2):
        poll = await backend.poll_jobs(frozenset())
        assert poll.whole and not poll.unchanged
    assert sent == ["/slurm/v0.0.38/jobs"] * 2


def test_an_unset_stamp_with_jobs_is_a_whole_reply() -> None:
    import json

    from clusterd.slurm.parse import parse_jobs_since

    jobs, stamp = parse_jobs_since(json.dumps({"jobs": [_JOB], "last_update": _UNSET}), asked_since=True)
    assert jobs is not None and len(jobs) == 1 and stamp == 0


async def test_a_release_that_refuses_update_time_gets_whole_reads(tmp_path: Path) -> None:
    """Slurm 24.11's v0.0.40/41 parsers answer 422 to the stamp they gave: the poll reads the whole
    queue at once, and every later poll too (never a failed poll, never the stamp again)."""
    sent: list[str] = []
    refusal = {"errors": [{"description": "Parsing of 1000 for timestamp failed (Unable to convert Data type)"}]}

    def handler(request: Sent) -> Any:
        sent.append(request.path)
        if "update_time" in request.path:
            return answer(422, json=refusal)
        return answer(200, json={"jobs": [_JOB], "last_update": _stamp(1000), "errors": []})

    backend = restd_backend(tmp_path, handler, restd_api_version="v0.0.41")
    for _ in range(3):
        poll = await backend.poll_jobs(frozenset())
        assert poll.whole and [j.job_id for j in poll.jobs] == ["7"]
    assert sent == [
        "/slurm/v0.0.41/jobs",
        "/slurm/v0.0.41/jobs?update_time=1000",
        "/slurm/v0.0.41/jobs",
        "/slurm/v0.0.41/jobs",
    ]


_NODE = {"name": "node1", "state": ["IDLE"], "cpus": 4, "partitions": ["debug"]}


async def test_nodes_are_asked_for_changes_and_kept_when_none(tmp_path: Path) -> None:
    """GET nodes?update_time= with the last reply's stamp: 26.05's 304 (no body) and 24.11's empty
    reply with an unset stamp both give the last answer again; a change gives every node."""
    sent: list[str] = []
    replies: list[Any] = [
        answer(200, json={"nodes": [_NODE], "last_update": _stamp(1000), "errors": []}),
        answer(304),
        answer(200, json={"nodes": [], "last_update": _UNSET, "errors": []}),
        answer(200, json={"nodes": [{**_NODE, "state": ["DOWN"]}], "last_update": _stamp(1010), "errors": []}),
        answer(304),
    ]

    def handler(request: Sent) -> Any:
        sent.append(request.path)
        return replies[len(sent) - 1]

    backend = restd_backend(tmp_path, handler, restd_api_version="v0.0.45")
    states = [[n.state.value for n in await backend.list_nodes()] for _ in replies]
    assert states == [["IDLE"], ["IDLE"], ["IDLE"], ["DOWN"], ["DOWN"]]
    assert sent == ["/slurm/v0.0.45/nodes"] + ["/slurm/v0.0.45/nodes?update_time=1000"] * 3 + [
        "/slurm/v0.0.45/nodes?update_time=1010"
    ]


async def test_a_refused_stamp_makes_node_and_job_reads_whole(tmp_path: Path) -> None:
    sent: list[str] = []
    refusal = {"errors": [{"description": "Parsing of 1000 for timestamp failed (Unable to convert Data type)"}]}

    def handler(request: Sent) -> Any:
        sent.append(request.path)
        if "update_time" in request.path:
            return answer(422, json=refusal)
        if request.path.endswith("/nodes"):
            return answer(200, json={"nodes": [_NODE], "last_update": _stamp(1000), "errors": []})
        return answer(200, json={"jobs": [_JOB], "last_update": _stamp(1000), "errors": []})

    backend = restd_backend(tmp_path, handler, restd_api_version="v0.0.41")
    for _ in range(2):
        assert [n.name for n in await backend.list_nodes()] == ["node1"]
    assert (await backend.poll_jobs(frozenset())).whole
    assert sent == [
        "/slurm/v0.0.41/nodes",
        "/slurm/v0.0.41/nodes?update_time=1000",
        "/slurm/v0.0.41/nodes",
        "/slurm/v0.0.41/jobs",
    ]


@pytest.mark.parametrize("filters", [True, False])
async def test_a_big_queue_is_polled_with_filtered_squeues_where_they_filter(tmp_path: Path, filters: bool) -> None:
    """Past 2,000 jobs a change through GET jobs costs the whole queue: squeue's filters (24.11 on) instead."""
    sent: list[str] = []
    many = [{**_JOB, "job_id": n} for n in range(1, 2002)]

    def handler(request: Sent) -> Any:
        sent.append(request.path)
        return answer(200, json={"jobs": many, "last_update": _stamp(1000 + len(sent)), "errors": []})

    squeue = SqueueFallback(filters)
    backend = restd_backend(tmp_path, handler, fallback=squeue, restd_api_version="v0.0.45")
    assert len(await backend.list_jobs()) == 2001
    poll = await backend.poll_jobs(frozenset({"7"}))
    assert (squeue.polls, poll.whole) == ((1, False) if filters else (0, True))
    # filtered: the followed job's state (restd_between); else a GET jobs since the last stamp
    assert sent[1] == ("/slurm/v0.0.45/jobs/state/?job_id=7" if filters else "/slurm/v0.0.45/jobs?update_time=1001")


async def test_a_release_that_fails_a_stamped_node_read_gets_whole_node_reads(tmp_path: Path) -> None:
    """Slurm 24.11's v0.0.42 answers ``GET nodes?update_time=`` with 500 ("Unable to query
    partitions") when nothing changed: the poll gets the whole node list at once and never sends
    the nodes a stamp again; job reads keep theirs."""
    sent: list[str] = []
    failure = {"errors": [{"description": "Unable to query partitions (Unspecified error)"}]}

    def handler(request: Sent) -> Any:
        sent.append(request.path)
        if request.path.startswith("/slurm/v0.0.42/nodes?update_time"):
            return answer(500, json=failure)
        if "/nodes" in request.path:
            return answer(200, json={"nodes": [_NODE], "last_update": _stamp(1000), "errors": []})
        return answer(200, json={"jobs": [_JOB], "last_update": _stamp(1000), "errors": []})

    backend = restd_backend(tmp_path, handler, restd_api_version="v0.0.42")
    for _ in range(3):
        assert [n.name for n in await backend.list_nodes()] == ["node1"]
    for _ in range(2):
        await backend.poll_jobs(frozenset())
    assert sent == [
        "/slurm/v0.0.42/nodes",
        "/slurm/v0.0.42/nodes?update_time=1000",
        "/slurm/v0.0.42/nodes",
        "/slurm/v0.0.42/nodes",
        "/slurm/v0.0.42/jobs",
        "/slurm/v0.0.42/jobs?update_time=1000",
    ]
