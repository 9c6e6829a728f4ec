"""Tables for ``history`` and ``list --all`` (pure: messages in, renderables out).

User-controlled text (names, reasons) goes into ``Text`` so brackets are never read as markup.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from rich.table import Table
from rich.text import Text

from clusterctl.cli.render import job_state, short_state, slurm_duration, styled_state, timestamp
from clusterctl.v1 import jobs_pb2


def _nodes(nodes: Iterable[str]) -> str:
    names = list(nodes)
    return ",".join(names) if names else "-"


def exit_text(job: jobs_pb2.HistoryEntry) -> str:
    """sacct's ExitCode column: ``code:signal``; ``-`` when the job has none."""
    return f"{job.exit_code}:{job.exit_signal}" if job.has_exit_code else "-"


def history_table(jobs: Iterable[jobs_pb2.HistoryEntry], *, show_source: bool) -> Table:
    table = Table(show_edge=False, header_style="bold")
    columns = ["JOBID", "NAME", "USER", "STATE", "EXIT", "ELAPSED", "RESTARTS", "NODES", "ENDED"]
    for column in [*columns, *(["SOURCE"] if show_source else [])]:
        table.add_column(column, no_wrap=column not in ("NAME", "NODES"))
    for job in jobs:
        elapsed = slurm_duration(job.elapsed.seconds) if job.HasField("elapsed") else "-"
        cells = [
            Text(job.job_id),
            Text(job.name),
            Text(job.user),
            styled_state(job_state(job.state)),
            Text(exit_text(job)),
            Text(elapsed),
            Text(str(job.restart_count)),
            Text(_nodes(job.nodes)),
            Text(timestamp(job.end_time)),
        ]
        table.add_row(*cells, *([Text(job.source)] if show_source else []))
    return table


def queue_table(jobs: Iterable[jobs_pb2.QueueEntry], *, now: float | None = None) -> Table:
    """squeue's default columns: JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)."""
    now = time.time() if now is None else now
    table = Table(show_edge=False, header_style="bold")
    for column in ("JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"):
        table.add_column(column, no_wrap=column not in ("NAME", "NODELIST(REASON)"))
    for job in jobs:
        started = job.start_time.seconds if job.HasField("start_time") else 0
        running = job.state != jobs_pb2.JOB_STATE_PENDING and started > 0
        until = job.end_time.seconds if job.HasField("end_time") else now  # a finished job's time stops
        where = _nodes(job.nodes) if job.nodes else f"({job.reason or 'None'})"
        job_id = Text(job.job_id, style="bold" if job.mine else "")
        table.add_row(
            job_id,
            Text(job.partition),
            Text(job.name),
            Text(job.user),
            Text(short_state(job.state)),
            Text(slurm_duration(max(0, int(until - started))) if running else "0:00"),
            Text(str(len(job.nodes) or "-")),
            Text(where),
        )
    return table
