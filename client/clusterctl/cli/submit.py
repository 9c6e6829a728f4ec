"""``clusterctl submit [options] (SCRIPT | --wrap CMD | -- COMMAND ...)``: flags -> JobSpec -> SubmitJob.

A SCRIPT (``-``, or no SCRIPT with stdin not a terminal: the script on stdin, as sbatch) is sent
byte-for-byte as ``spec.script`` so its ``#SBATCH`` lines keep working (the server honours them;
flags given here win, then ``SBATCH_*`` variables, as with sbatch). The answer is sbatch's:
``Submitted batch job N`` (``--parsable``: the id; ``-v`` adds state and placement on stderr). As with sbatch, options
go before SCRIPT and what follows it is the script's: the API has no field for script arguments
yet, so they are refused rather than dropped or read as options. ``-- COMMAND ...`` sends
``spec.command`` and the server wraps it in a script. The caller's working directory, script
name and environment (``--export``, see :mod:`clusterctl.cli.environment`) travel too. Flags only
get a shape check here; the server validates the rest and answers INVALID_ARGUMENT naming the field.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any

from google.protobuf.duration_pb2 import Duration

from clusterctl.cli import render
from clusterctl.cli.environment import (
    MAX_TOTAL_BYTES,
    MAX_VALUE_BYTES,
    MAX_VARS,
    collect,
    export_value,
    with_names,
)
from clusterctl.cli.jobs import wait_for
from clusterctl.cli.options import (
    ArgumentError,
    add_json_option,
    add_placement_options,
    command_parent,
    placement_from_args,
)
from clusterctl.cli.sbatch_options import add_sbatch_options, apply_sbatch_options, wrap_script
from clusterctl.cli.values import (
    argtype,
    duration_seconds,
    env_assignment,
    env_name,
    exit_code,
    non_negative_int,
    positive_int,
)
from clusterctl.client import new_request_id
from clusterctl.errors import ServiceError
from clusterctl.v1 import jobs_pb2

MAX_SCRIPT_BYTES = 1 << 20  # the server's default limit; failing here saves a round trip

_RESTART_TOGGLES = (
    ("requeue-on-node-failure", "on_node_failure", "restart when a node fails"),
    ("requeue-on-preemption", "on_preemption", "restart when preempted"),
    ("requeue-on-timeout", "on_time_limit", "restart when the time limit is hit"),
    ("exclude-failed-nodes", "exclude_failed_nodes", "keep a failed node out of the restarted job"),
    ("requeue-on-rank-failure", "on_rank_failure", "restart when one rank crashes or hangs on a healthy node"),
)


def register(subparsers: Any) -> None:
    """Add ``submit``: sbatch's flags with sbatch's meanings, then the service's own options."""
    p = subparsers.add_parser(
        "submit",
        parents=[command_parent()],
        help="submit a batch script or a command",
        usage="clusterctl submit [options] (SCRIPT | --wrap CMD | -- COMMAND ...)",
        description="Submit an sbatch script unchanged (its #SBATCH lines are honoured; flags given "
        "here win, as on sbatch's command line), a shell string with --wrap, or, after '--', a "
        "command to run with srun. Options go before SCRIPT: what follows it belongs to the script.",
    )
    p.add_argument("script", metavar="SCRIPT", nargs="?", help="an sbatch script ('-' reads stdin)")
    p.add_argument("script_args", metavar="ARG", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add_json_option(p)
    add_sbatch_options(p)
    _add_environment_options(p)
    _add_restart_options(p)
    add_placement_options(p)
    p.add_argument(
        "--request-id",
        metavar="ID",
        default=None,
        help="idempotency key: resubmitting with the same id returns the same job (default: a fresh one)",
    )
    p.add_argument(
        "-W",
        "--wait",
        action="store_true",
        help="wait until the job ends and exit with its exit code (128+N if killed by signal N; "
        "1 if it failed without one)",
    )
    p.add_argument("--parsable", action="store_true", help="print only the job id (as sbatch --parsable)")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="after sbatch's 'Submitted batch job N', the job's state and placement (on stderr)",
    )
    p.set_defaults(func=submit, command_argv=[])


def _add_environment_options(p: argparse.ArgumentParser) -> None:
    env = p.add_argument_group("environment (as sbatch: --export=ALL by default, this shell's variables travel)")
    env.add_argument(
        "--export",
        metavar="{ALL|NONE|[ALL,]NAME[=VALUE],...}",
        type=argtype(export_value),
        help="which variables of this shell the job gets (default ALL, exported bash functions too; "
        "SLURM_*, SBATCH_*, SALLOC_*, SRUN_*, CLUSTERCTL_* are never sent)",
    )
    env.add_argument(
        "--env",
        metavar="NAME=VALUE",
        type=argtype(env_assignment),
        action="append",
        default=[],
        help="set a variable in the job (repeatable; wins over --export)",
    )
    env.add_argument(
        "--export-env",
        metavar="NAME",
        type=argtype(env_name),
        action="append",
        default=[],
        help="copy a variable from this shell into the job even with --export=NONE (repeatable)",
    )


def _add_restart_options(p: argparse.ArgumentParser) -> None:
    rp = p.add_argument_group("checkpoint and restart policy (unset: the server's defaults)")
    rp.add_argument("--checkpoint-uri", metavar="URI", help="s3://bucket/prefix or a shared path")
    rp.add_argument(
        "--checkpoint-tier",
        choices=["memory"],
        help="memory: a memory tier per node holds each checkpoint (and a peer node a copy) before it reaches its URI",
    )
    rp.add_argument("--max-restarts", metavar="N", type=argtype(non_negative_int))
    rp.add_argument(
        "--spare-nodes",
        metavar="K",
        type=argtype(non_negative_int),
        default=0,
        help="hold K more nodes than -N; a node failure restarts the job's srun steps in place on a spare",
    )
    for flag, _field, text in _RESTART_TOGGLES:
        rp.add_argument(f"--{flag}", action=argparse.BooleanOptionalAction, default=None, help=text)
    rp.add_argument(
        "--retry-exit-code",
        metavar="CODE",
        type=argtype(exit_code),
        action="append",
        default=[],
        help="restart on this exit code (repeatable)",
    )
    rp.add_argument(
        "--fatal-exit-code",
        metavar="CODE",
        type=argtype(exit_code),
        action="append",
        default=[],
        help="never restart on this exit code (repeatable)",
    )
    rp.add_argument("--backoff", metavar="DURATION", type=argtype(duration_seconds), help="delay before a restart")
    rp.add_argument(
        "--no-progress-limit",
        metavar="K",
        type=argtype(positive_int),
        help="stop after K restarts without a new checkpoint",
    )
    rp.add_argument(
        "--hang-timeout",
        metavar="DURATION",
        type=argtype(duration_seconds),
        help="a rank silent this long on a node that answers is hung: restart the job (heartbeats)",
    )
    rp.add_argument(
        "--heartbeat-interval",
        metavar="DURATION",
        type=argtype(duration_seconds),
        help="how often each rank's client library reports to clusterd",
    )
    rp.add_argument(
        "--signal-before",
        metavar="SECONDS",
        type=argtype(duration_seconds),
        help="send SIGUSR1 this long before the time limit (time to checkpoint)",
    )


def read_script(path: str, *, limit: int = MAX_SCRIPT_BYTES) -> str:
    """The script's text, unchanged. Raises ArgumentError (exit 2) when unreadable or too big."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(limit + 1)
    except OSError as exc:
        raise ArgumentError(f"cannot read script {path!r}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ArgumentError(f"script {path!r} is larger than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ArgumentError(f"script {path!r} is not UTF-8 text") from None


def build_spec(args: argparse.Namespace, *, environ: Mapping[str, str] | None = None) -> jobs_pb2.JobSpec:
    """Map the parsed flags onto a JobSpec; unset flags stay unset so the script's #SBATCH apply.

    Paths (-o, -e, -D) go as given: the server resolves relative ones against
    ``submit_directory``, this process's working directory, as sbatch does.

    Raises:
        ArgumentError: not exactly one of SCRIPT / --wrap / -- COMMAND, script arguments, flags
            that contradict each other, or --export-env of a variable that is not set.
    """
    environ = os.environ if environ is None else environ
    if args.export is None and environ.get("SBATCH_EXPORT"):  # sbatch's input variable for --export
        args.export = argtype(export_value)(environ["SBATCH_EXPORT"])
    sources = (("SCRIPT", args.script), ("--wrap", args.wrap), ("'-- COMMAND'", args.command_argv))
    given = [what for what, value in sources if value]
    if len(given) > 1:
        raise ArgumentError(f"give one of SCRIPT, --wrap or '-- COMMAND ...', not {' and '.join(given)}")
    if not given and not _stdin_is_terminal():
        args.script, given = "-", ["SCRIPT"]  # `clusterctl submit < job.sh`: the script on stdin, as sbatch
    if not given:
        raise ArgumentError("nothing to run: give an sbatch SCRIPT, --wrap CMD or '-- COMMAND ...'")
    if args.script_args:
        raise ArgumentError(
            f"script arguments {' '.join(args.script_args)!r}: the service's API cannot carry arguments to a "
            "script yet (options go before SCRIPT, as with sbatch; or use '-- COMMAND ...')"
        )
    if args.json and args.parsable:
        raise ArgumentError("--json and --parsable exclude each other")

    spec = jobs_pb2.JobSpec(request_id=args.request_id or new_request_id(), submit_directory=_cwd())
    if args.script:
        spec.script = read_script(args.script)
        if not spec.script and args.script == "-":
            raise ArgumentError("nothing to run: the script on stdin is empty")
        spec.script_name = "sbatch" if args.script == "-" else os.path.basename(args.script)
    elif args.wrap:
        spec.script = wrap_script(args.wrap)
        spec.script_name = "wrap"
    else:
        spec.command.extend(args.command_argv)
    apply_sbatch_options(args, spec, environ)
    if args.constraint:
        spec.constraint = "&".join(args.constraint)
    _set_if(spec, "checkpoint_uri", args.checkpoint_uri)
    _set_if(spec, "checkpoint_tier", args.checkpoint_tier)
    _set_if(spec, "spare_nodes", args.spare_nodes)
    _set_environment(args, spec, environ)

    policy = _restart_policy(args)
    if policy.ListFields():
        spec.restart_policy.CopyFrom(policy)
    placement = placement_from_args(args, with_constraints=False)
    if placement is not None:
        spec.placement.CopyFrom(placement)
    return spec


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is None or sys.stdin.isatty()
    except (AttributeError, ValueError):  # closed or replaced
        return True


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError as exc:
        raise ArgumentError(f"the current directory is gone ({exc.strerror}): cd somewhere that exists") from None


def _set_environment(args: argparse.Namespace, spec: jobs_pb2.JobSpec, environ: Mapping[str, str]) -> None:
    """--export (ALL by default), then --export-env, then --env: later ones win."""
    exported = collect(args.export, environ)
    spec.environment.update(exported.environment)
    if exported.left_out:
        shown = ", ".join(exported.left_out[:10]) + (", ..." if len(exported.left_out) > 10 else "")
        print(
            f"clusterctl: warning: {len(exported.left_out)} variable(s) of this shell not sent (over {MAX_VARS}, "
            f"{MAX_VALUE_BYTES} bytes each or {MAX_TOTAL_BYTES} bytes in all): {shown}; "
            "name the ones the job needs in --export or --env",
            file=sys.stderr,
        )
    for name in args.export_env:
        if name not in environ:
            raise ArgumentError(f"--export-env {name}: not set in this environment")
        spec.environment[name] = environ[name]
    for name, value in args.env:
        spec.environment[name] = value
    export = with_names(exported.export, [*args.export_env, *(name for name, _value in args.env)])
    if export is not None:
        spec.export = export


def _set_if(spec: jobs_pb2.JobSpec, field: str, value: object) -> None:
    if value is not None:
        setattr(spec, field, value)


def _restart_policy(args: argparse.Namespace) -> jobs_pb2.RestartPolicy:
    policy = jobs_pb2.RestartPolicy(retryable_exit_codes=args.retry_exit_code, fatal_exit_codes=args.fatal_exit_code)
    if args.max_restarts is not None:
        policy.max_restarts = args.max_restarts
    for flag, field, _text in _RESTART_TOGGLES:
        value = getattr(args, flag.replace("-", "_"))
        if value is not None:
            setattr(policy, field, value)
    if args.backoff is not None:
        policy.backoff.CopyFrom(Duration(seconds=args.backoff))
    if args.no_progress_limit is not None:
        policy.no_progress_limit = args.no_progress_limit
    if args.signal_before is not None:
        policy.signal_before_timeout_seconds = args.signal_before
    if args.hang_timeout is not None:
        policy.hang_timeout.CopyFrom(Duration(seconds=args.hang_timeout))
    if args.heartbeat_interval is not None:
        policy.heartbeat_interval.CopyFrom(Duration(seconds=args.heartbeat_interval))
    return policy


def submit(args: argparse.Namespace) -> int:
    spec = build_spec(args)
    client = args.make_client()
    try:
        response = client.submit(spec)
    except ServiceError as exc:
        # A reused --request-id with a different request, or a job Slurm refused as asked: bad
        # input, exit 2 (sbatch's refusals are the caller's to fix too).
        if exc.code_name in ("ALREADY_EXISTS", "FAILED_PRECONDITION"):
            raise ArgumentError(exc.message or exc.code_name) from None
        raise
    if args.json:
        render.print_json(render.to_dict(response))
    elif args.parsable:
        print(response.job.job_id, flush=True)
    else:
        print(render.submitted(response), flush=True)
        if args.verbose:
            render.console(stderr=True).print(render.submitted_details(response))
    if not args.wait:
        return 0
    job_id = response.job.job_id
    try:
        return wait_for(client, job_id, as_json=args.json, quiet=args.parsable)
    except KeyboardInterrupt:
        print(
            f"clusterctl: stopped waiting; job {job_id} keeps going (clusterctl cancel {job_id} stops it)",
            file=sys.stderr,
        )
        return 130
