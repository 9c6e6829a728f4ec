"""Job commands: ``status``, ``list``, ``watch``, ``cancel``, ``requeue``.

Each parses its flags, makes one or a few client calls and renders; the watch loop
(:func:`follow`) is shared with ``submit --wait``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.live import Live

from clusterctl.cli import arrays, render
from clusterctl.cli.options import ArgumentError, add_json_option, command_parent, describe_service_error
from clusterctl.cli.values import argtype, positive_int, split_list
from clusterctl.digits import is_digits
from clusterctl.errors import ResumeExpired, ServiceError
from clusterctl.v1 import jobs_pb2

_RECONNECTS = 5  # the service restarting under a long watch should not end it


def register(subparsers: Any) -> None:
    """Add the job commands to the top-level parser."""
    parent = command_parent()

    p = subparsers.add_parser("status", parents=[parent], help="show one job in detail")
    p.add_argument("job_id", metavar="JOB_ID")
    add_json_option(p)
    p.set_defaults(func=status)

    p = subparsers.add_parser("list", parents=[parent], help="list jobs in a table")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--all-users", "-a", action="store_true", help="everyone's jobs (admins only)")
    who.add_argument("--user", "-u", metavar="USER", default="", help="another user's jobs (admins only)")
    who.add_argument(
        "--all",
        dest="queue",
        action="store_true",
        help="the whole queue like squeue: everyone's jobs, with the fields squeue shows everyone",
    )
    p.add_argument("--finished", action="store_true", help="include jobs that have finished")
    p.add_argument(
        "--state",
        "-s",
        metavar="STATE",
        action="append",
        default=[],
        help="only jobs in this state (repeatable or comma-separated: running,pending)",
    )
    p.add_argument("--limit", metavar="N", type=argtype(positive_int), default=0, help="at most N jobs")
    p.add_argument(
        "--array", "-r", action="store_true", help="one row per array task (default: pending ones collapsed, as squeue)"
    )
    add_json_option(p)
    p.set_defaults(func=list_jobs)

    p = subparsers.add_parser("watch", parents=[parent], help="follow jobs live (Ctrl-C to stop)")
    p.add_argument("job_ids", metavar="JOB_ID", nargs="*", help="jobs to follow (default: all of yours)")
    p.add_argument(
        "--until-done",
        action="store_true",
        help="exit when every watched job is terminal: 0 if all COMPLETED, else 1",
    )
    add_json_option(p)
    p.set_defaults(func=watch)

    for name, verb in (("cancel", "cancel"), ("requeue", "requeue")):
        p = subparsers.add_parser(name, parents=[parent], help=f"{verb} jobs")
        p.add_argument("job_ids", metavar="JOB_ID", nargs="+")
        add_json_option(p)
        p.set_defaults(func=cancel if name == "cancel" else requeue)


# -- status / list -----------------------------------------------------------------------------


def status(args: argparse.Namespace) -> int:
    job = args.make_client().get(args.job_id)
    if args.json:
        render.print_json(render.to_dict(job))
    else:
        render.console().print(render.job_detail(job))
    return 0


def list_jobs(args: argparse.Namespace) -> int:
    try:
        states = [render.parse_job_state(s) for item in args.state for s in split_list(item)]
    except ValueError as exc:
        raise ArgumentError(f"argument --state: {exc}") from None
    if args.queue:
        from clusterctl.cli import views  # views builds on this module

        return views.queue(args, states)
    jobs = args.make_client().list_jobs(
        states=states,
        user="*" if args.all_users else args.user,
        include_finished=args.finished,
        limit=args.limit,
    )
    if args.json:
        render.print_json({"jobs": [render.to_dict(j) for j in jobs]})
    elif not jobs:
        render.console().print("No jobs." + ("" if args.finished else " (--finished shows finished ones)"))
    else:
        render.console().print(render.jobs_table(arrays.rows(jobs, expand=args.array)))
    return 0


# -- watch -------------------------------------------------------------------------------------


def follow(client: Any, job_ids: list[str], *, until_done: bool) -> Iterator[jobs_pb2.JobEvent]:
    """Yield WatchJobs events, reconnecting when the stream drops, until every job is terminal.

    With ``until_done`` the generator returns once each of ``job_ids`` has been seen terminal;
    otherwise it runs until the caller stops (Ctrl-C). The client itself continues a stream that
    broke at another replica; when no replica answered for a while (UNAVAILABLE) or the service
    cannot resume it (too old), it is re-opened a few times with a snapshot so no final state is missed.
    """
    pending = set(job_ids)
    failures = 0
    while True:
        try:
            for event in client.watch(job_ids or None, include_initial=True):
                failures = 0
                yield event
                pending -= _finished_ids(event.job, pending)
                if until_done and not pending:
                    return
        except ResumeExpired:
            pass  # the service's event log no longer reaches back to our last event: a fresh snapshot
        except ServiceError as exc:
            if exc.code_name != "UNAVAILABLE" or failures >= _RECONNECTS:
                raise
        else:
            if failures >= _RECONNECTS:
                raise ServiceError("UNAVAILABLE", "the watch stream keeps ending; giving up")
        failures += 1
        time.sleep(min(2.0**failures / 4, 5.0))


def _finished_ids(job: jobs_pb2.JobStatus, asked: set[str]) -> set[str]:
    """Which of the ids asked for ``job`` names and has ended: the job, or one of its array tasks."""
    done = set()
    for job_id in asked:
        parent, task = arrays.split_id(job_id)
        if parent != job.job_id:
            continue
        if job.terminal or (task is not None and any(t.task_id == task and t.has_exit_code for t in job.tasks)):
            done.add(job_id)
    return done


def _views(job: jobs_pb2.JobStatus, asked: list[str]) -> dict[str, jobs_pb2.JobStatus]:
    """What ``watch`` shows for an event: the job, or each array task of it that was asked for."""
    tasks = {t for parent, t in map(arrays.split_id, asked) if parent == job.job_id and t is not None}
    if not tasks or job.job_id in asked:
        return {job.job_id: job, **{f"{job.job_id}_{t}": arrays.task_view(job, t) for t in tasks}}
    return {f"{job.job_id}_{t}": arrays.task_view(job, t) for t in tasks}


def _job_key(job_id: str) -> tuple[int, int, str]:
    """Numeric order for ``42`` and array tasks ``42_3`` (after ``42``), other ids last."""
    head, _, task = job_id.partition("_")
    if is_digits(head) and (not task or is_digits(task)):
        return int(head), int(task) + 1 if task else 0, ""
    return sys.maxsize, 0, job_id


def watch(args: argparse.Namespace) -> int:
    """Live table on a terminal, one line per event when piped, JSON lines with --json."""
    client = args.make_client()
    job_ids: list[str] = list(dict.fromkeys(args.job_ids))
    if args.until_done and not job_ids:
        # Without ids "done" needs a fixed set: the caller's jobs that are not finished yet.
        job_ids = [j.job_id for j in client.list_jobs() if not j.terminal]
        if not job_ids:
            return 0
    latest: dict[str, jobs_pb2.JobStatus] = {}
    con = render.console()

    def table() -> Any:
        return render.jobs_table((latest[k] for k in sorted(latest, key=_job_key)), title="clusterctl watch")

    def show(event: jobs_pb2.JobEvent) -> None:
        if args.json:
            render.print_json(render.to_dict(event))
        elif not con.is_terminal:
            con.print(render.event_line(event))

    try:
        if args.json or not con.is_terminal:
            for event in follow(client, job_ids, until_done=args.until_done):
                latest.update(_views(event.job, job_ids))
                show(event)
        else:
            with Live(table(), console=con, refresh_per_second=4) as live:
                for event in follow(client, job_ids, until_done=args.until_done):
                    latest.update(_views(event.job, job_ids))
                    live.update(table())
    except KeyboardInterrupt:
        return 0
    if not args.until_done:
        return 0
    ok = all(latest[j].state == jobs_pb2.JOB_STATE_COMPLETED for j in job_ids if j in latest)
    return 0 if ok and all(j in latest for j in job_ids) else 1


def exit_status(job: jobs_pb2.JobStatus) -> int:
    """The shell-style exit status of a finished job, what ``sbatch --wait`` would return.

    128+N when a signal N ended it; its exit code when non-zero; 1 for a job that did not
    complete (FAILED, TIMEOUT, NODE_FAIL, CANCELLED, ...) without either, so a failure is never 0.
    An array's status is its tasks': COMPLETED only when every task completed, and the exit code
    (or signal) of the first task that failed, which the server reports on the array's record.
    """
    if job.has_exit_code and job.exit_signal:
        return min(128 + job.exit_signal, 255)
    if job.has_exit_code and 0 < job.exit_code < 256:
        return job.exit_code
    return 0 if job.state == jobs_pb2.JOB_STATE_COMPLETED else 1


def wait_for(client: Any, job_id: str, *, as_json: bool, quiet: bool = False) -> int:
    """``submit --wait``: print each state change until the job is terminal; return its :func:`exit_status`.

    ``quiet`` (``--parsable``) prints nothing, so the job id stays the only output.
    """
    con = render.console()
    last: tuple[int, int] | None = None
    final: jobs_pb2.JobStatus | None = None
    for event in follow(client, [job_id], until_done=True):
        final = event.job
        key = (event.job.state, event.job.restart_count)
        if as_json:
            render.print_json(render.to_dict(event))
        elif not quiet and (key != last or event.type == jobs_pb2.JOB_EVENT_TYPE_RESTARTED):
            con.print(render.event_line(event))
        last = key
    return 1 if final is None else exit_status(final)


# -- cancel / requeue --------------------------------------------------------------------------


def _each(args: argparse.Namespace, call: Callable[[Any, str], jobs_pb2.JobStatus], verb: str) -> int:
    """Act on every id even when one fails; the exit code reports the worst failure."""
    client = args.make_client()
    server_failure = bad_input = False
    for job_id in args.job_ids:
        try:
            job = call(client, job_id)
        except ServiceError as exc:
            server_failure |= not exc.is_bad_input
            bad_input |= exc.is_bad_input
            print(f"clusterctl: error: job {job_id}: {describe_service_error(exc, args)}", file=sys.stderr)
            continue
        if args.json:
            render.print_json(render.to_dict(job))
        else:
            render.console().print(f"{verb} job {job.job_id or job_id}: {render.job_state(job.state)}")
    return 1 if server_failure else 2 if bad_input else 0


def cancel(args: argparse.Namespace) -> int:
    return _each(args, lambda c, j: c.cancel(j), "Cancelled")


def requeue(args: argparse.Namespace) -> int:
    return _each(args, lambda c, j: c.requeue(j), "Requeued")
