"""``logs``, ``history``, ``hold``, ``release``, ``adopt``, and the whole queue for ``list --all``.

Thin like the other commands: flags in, one client call, render. ``logs`` writes the job's bytes
to stdout unchanged (as ``cat``/``tail`` would) and the service's notices (requeued, truncated,
waiting for the file) to stderr, so ``clusterctl logs 14 > out.txt`` holds exactly the file.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime
from typing import Any, cast

from clusterctl.cli import render, render_views
from clusterctl.cli.jobs import _each
from clusterctl.cli.options import ArgumentError, add_json_option, command_parent
from clusterctl.cli.values import argtype, non_negative_int, positive_int, split_list
from clusterctl.v1 import jobs_pb2

_AGO = re.compile(r"^(?:now)?-?\s*(\d+)\s*(s|sec|secs?|m|min|mins?|h|hours?|d|days?|w|weeks?)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def register(subparsers: Any) -> None:
    parent = command_parent()

    p = subparsers.add_parser(
        "logs",
        parents=[parent],
        help="print (or follow) a job's output",
        description="A job's stdout (or --err: stderr), read by clusterd with the job "
        "owner's rights. -f follows it like tail -f, across requeues, until the job ends.",
    )
    p.add_argument("job_id", metavar="JOB[_TASK]")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing what the job appends until it ends")
    p.add_argument("--err", action="store_true", help="stderr instead of stdout")
    p.add_argument(
        "--tail",
        "-n",
        metavar="N",
        type=argtype(non_negative_int),
        default=0,
        help="only the last N lines (0: the whole file)",
    )
    p.set_defaults(func=logs)

    p = subparsers.add_parser(
        "history",
        parents=[parent],
        help="finished jobs: state, exit code, elapsed, restarts",
        description="Finished jobs from clusterd's records, and from Slurm accounting when "
        "the cluster runs slurmdbd (plain sbatch jobs too).",
    )
    p.add_argument(
        "--state",
        "-s",
        metavar="STATE",
        action="append",
        default=[],
        help="only these end states (repeatable or comma-separated; Slurm's CD, F, TO, CA, NF... too)",
    )
    p.add_argument("--name", metavar="PATTERN", default="", help="job name or shell-style pattern ('train-*')")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--all-users", "-a", action="store_true", help="everyone's jobs (admins only)")
    who.add_argument("--user", "-u", metavar="USER", default="", help="another user's jobs (admins only)")
    p.add_argument(
        "--since",
        "-S",
        metavar="WHEN",
        type=argtype(when),
        default=None,
        help="ended at or after: 2026-11-20, 2026-11-20T14:00, now-2h, 3d (ago); default 7 days ago",
    )
    p.add_argument("--until", "-E", metavar="WHEN", type=argtype(when), default=None, help="ended before (default now)")
    p.add_argument("--limit", metavar="N", type=argtype(positive_int), default=0, help="at most N jobs")
    add_json_option(p)
    p.set_defaults(func=history)

    for name, verb in (
        ("hold", "hold pending jobs (they stay pending until released)"),
        ("release", "release held jobs"),
    ):
        p = subparsers.add_parser(name, parents=[parent], help=verb)
        p.add_argument("job_ids", metavar="JOB_ID", nargs="+")
        add_json_option(p)
        p.set_defaults(func=hold if name == "hold" else release)

    p = subparsers.add_parser(
        "adopt",
        parents=[parent],
        help="supervise a job you submitted with plain sbatch",
        description="Put a queued or running job of yours, submitted with sbatch, under "
        "clusterd's supervision: restarts after node failures, status, logs, watch. Its Slurm "
        "comment is replaced by clusterd's tag and it is made requeueable.",
    )
    p.add_argument("job_id", metavar="JOB_ID")
    p.add_argument(
        "--checkpoint-uri",
        metavar="URI",
        default="",
        help="where the job checkpoints (s3://... or a directory): restarts stop when it makes no progress",
    )
    add_json_option(p)
    p.set_defaults(func=adopt)


def when(text: str) -> float:
    """A point in time: ISO date/time (local), ``now``, or an age like ``now-2h`` / ``3d``."""
    text = text.strip()
    if text == "now":
        return time.time()
    m = _AGO.match(text.lower())
    if m:
        return time.time() - int(m.group(1)) * _UNIT_SECONDS[m.group(2)[0]]
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use 2026-11-20, 2026-11-20T14:00, now-2h or 3d") from None


def logs(args: argparse.Namespace) -> int:
    client = args.make_client()
    out = sys.stdout.buffer
    try:
        for chunk in client.read_log(args.job_id, stderr=args.err, tail_lines=args.tail, follow=args.follow):
            if chunk.notice:
                out.flush()
                print(f"clusterctl: {chunk.notice}", file=sys.stderr, flush=True)
            if chunk.data:
                out.write(chunk.data)
                if args.follow:
                    out.flush()
    except KeyboardInterrupt:
        return 0
    finally:
        out.flush()
    return 0


def history(args: argparse.Namespace) -> int:
    try:
        states = [render.parse_job_state(s) for item in args.state for s in split_list(item)]
    except ValueError as exc:
        raise ArgumentError(f"argument --state: {exc}") from None
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise ArgumentError("argument --since: must be before --until")
    request = jobs_pb2.ListHistoryRequest(
        states=cast("list[jobs_pb2.JobState]", states),
        name=args.name,
        limit=args.limit,
        user="*" if args.all_users else args.user,
    )
    for field in ("since", "until"):
        value = getattr(args, field)
        if value is not None:
            getattr(request, field).FromNanoseconds(int(value * 1e9))
    response = args.make_client().history(request)
    if args.json:
        render.print_json(render.to_dict(response))
        return 0
    con = render.console()
    if response.jobs:
        con.print(render_views.history_table(response.jobs, show_source=response.accounting))
    else:
        con.print("No finished jobs in that window.")
    if response.accounting_note:
        print(
            f"clusterctl: {response.accounting_note}: jobs submitted with plain sbatch are not listed", file=sys.stderr
        )
    return 0


def hold(args: argparse.Namespace) -> int:
    return _each(args, lambda c, j: c.hold(j), "Held")


def release(args: argparse.Namespace) -> int:
    return _each(args, lambda c, j: c.release(j), "Released")


def adopt(args: argparse.Namespace) -> int:
    response = args.make_client().adopt(args.job_id, checkpoint_uri=args.checkpoint_uri)
    if args.json:
        render.print_json(render.to_dict(response))
    elif response.already:
        render.console().print(f"job {response.job.job_id} is already supervised by clusterd")
    else:
        render.console().print(
            f"Adopted job {response.job.job_id}: clusterd now supervises it ({render.job_state(response.job.state)})"
        )
    return 0


def queue(args: argparse.Namespace, states: list[int]) -> int:
    """``list --all``: the whole queue, as squeue shows it to everyone."""
    response = args.make_client().queue(states=states)
    if args.json:
        render.print_json(render.to_dict(response))
    elif not response.jobs:
        render.console().print("The queue is empty.")
    else:
        render.console().print(render_views.queue_table(response.jobs))
    return 0
