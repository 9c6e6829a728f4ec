"""``list --all``'s table: squeue's TIME column, which stops when a job ends."""

from __future__ import annotations

import io

from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console

from clusterctl.cli.render_views import queue_table
from clusterctl.v1 import jobs_pb2

NOW = 1_700_000_000


def _row(state: jobs_pb2.JobState, start: int, end: int | None = None) -> jobs_pb2.QueueEntry:
    entry = jobs_pb2.QueueEntry(
        job_id=str(state), partition="debug", name="x", user="alice", state=state, nodes=["node1"]
    )
    entry.start_time.CopyFrom(Timestamp(seconds=start))
    if end is not None:
        entry.end_time.FromSeconds(end)
    return entry


def _times(*entries: jobs_pb2.QueueEntry) -> list[str]:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(queue_table(entries, now=NOW))
    lines = console.file.getvalue().splitlines()[2:]  # type: ignore[attr-defined]
    return [[w for w in line.split() if w != "│"][5] for line in lines]


def test_a_finished_row_shows_its_elapsed_time_and_a_running_one_counts_to_now() -> None:
    finished = _row(jobs_pb2.JOB_STATE_COMPLETED, NOW - 7200, NOW - 7200 + 65)
    running = _row(jobs_pb2.JOB_STATE_RUNNING, NOW - 125)
    assert _times(finished, running) == ["00:01:05", "00:02:05"]


def test_a_finished_row_from_an_older_server_without_end_time_counts_to_now() -> None:
    assert _times(_row(jobs_pb2.JOB_STATE_FAILED, NOW - 60)) == ["00:01:00"]
