"""``clusterctl submit [options] [SCRIPT | -- COMMAND ...]``: flags -> JobSpec -> SubmitJob.

A SCRIPT is sent byte-for-byte as ``spec.script`` so its ``#SBATCH`` lines keep working (the
server honours them; flags given here win). ``-- COMMAND ...`` sends ``spec.command`` and the
server wraps it in a script. Flags only get a shape check here; the server validates the rest
and answers INVALID_ARGUMENT naming the field.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from google.protobuf.duration_pb2 import Duration

from clusterctl.cli import render
from clusterctl.cli.jobs import wait_for
from clusterctl.cli.options import (
    ArgumentError,
    add_json_option,
    add_placement_options,
    command_parent,
    placement_from_args,
)
from clusterctl.cli.values import (
    argtype,
    duration_seconds,
    env_assignment,
    env_name,
    exit_code,
    gres_gpus,
    memory_mb,
    non_negative_int,
    positive_int,
    time_limit,
)
from clusterctl.client import new_request_id
from clusterctl.v1 import jobs_pb2

MAX_SCRIPT_BYTES = 1 << 20  # the server's default limit; failing here saves a round trip

_RESTART_TOGGLES = (
    ("requeue-on-node-failure", "on_node_failure", "restart when a node fails"),
    ("requeue-on-preemption", "on_preemption", "restart when preempted"),
    ("requeue-on-timeout", "on_time_limit", "restart when the time limit is hit"),
    ("exclude-failed-nodes", "exclude_failed_nodes", "keep a failed node out of the restarted job"),
)


def register(subparsers: Any) -> None:
    """Add ``submit`` with sbatch-like resource flags plus the service's restart/placement flags."""
    p = subparsers.add_parser(
        "submit",
        parents=[command_parent()],
        help="submit a batch script or a command",
        usage="clusterctl submit [options] [SCRIPT | -- COMMAND ...]",
        description="Submit an sbatch script unchanged (its #SBATCH lines are honoured) or, "
        "after '--', a command to run with srun. Flags given here override the script's.",
    )
    p.add_argument("script", metavar="SCRIPT", nargs="?", help="an sbatch script ('-' reads stdin)")
    add_json_option(p)

    res = p.add_argument_group("resources (as in sbatch)")
    res.add_argument("-J", "--job-name", metavar="NAME")
    res.add_argument("-N", "--nodes", metavar="N", type=argtype(positive_int))
    res.add_argument("--ntasks-per-node", metavar="N", type=argtype(positive_int))
    res.add_argument("--gpus-per-node", metavar="N", type=argtype(positive_int))
    res.add_argument("--gres", metavar="gpu[:TYPE]:N", type=argtype(gres_gpus), help="GPUs per node, sbatch style")
    res.add_argument("-c", "--cpus-per-task", metavar="N", type=argtype(positive_int))
    res.add_argument("--mem", metavar="SIZE", type=argtype(memory_mb), help="memory per node: 4G, 512M, 1024 (MB)")
    res.add_argument(
        "-t", "--time", metavar="TIME", type=argtype(time_limit), help="time limit: 1:00:00, 2-00, 90m, 2h"
    )
    res.add_argument("-p", "--partition", metavar="NAME")
    res.add_argument("-A", "--account", metavar="NAME")
    res.add_argument("-q", "--qos", metavar="NAME")
    res.add_argument("-D", "--chdir", metavar="DIR", help="working directory of the job")
    res.add_argument("-o", "--output", metavar="PATH", help="stdout file (Slurm patterns like %%j work)")
    res.add_argument("-e", "--error", metavar="PATH", help="stderr file")

    env = p.add_argument_group("environment")
    env.add_argument(
        "--env",
        metavar="NAME=VALUE",
        type=argtype(env_assignment),
        action="append",
        default=[],
        help="set a variable in the job (repeatable)",
    )
    env.add_argument(
        "--export-env",
        metavar="NAME",
        type=argtype(env_name),
        action="append",
        default=[],
        help="copy a variable from this shell into the job (repeatable)",
    )

    rp = p.add_argument_group("checkpoint and restart policy (unset: the server's defaults)")
    rp.add_argument("--checkpoint-uri", metavar="URI", help="s3://bucket/prefix or a shared path")
    rp.add_argument("--max-restarts", metavar="N", type=argtype(non_negative_int))
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
        "--signal-before",
        metavar="SECONDS",
        type=argtype(duration_seconds),
        help="send SIGUSR1 this long before the time limit (time to checkpoint)",
    )

    add_placement_options(p)

    p.add_argument(
        "--request-id",
        metavar="ID",
        default=None,
        help="idempotency key: resubmitting with the same id returns the same job (default: a fresh one)",
    )
    p.add_argument("--wait", action="store_true", help="wait until the job is terminal: exit 0 if COMPLETED, else 1")
    p.set_defaults(func=submit, command_argv=[])


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


def build_spec(args: argparse.Namespace, *, environ: dict[str, str] | None = None) -> jobs_pb2.JobSpec:
    """Map the parsed flags onto a JobSpec; unset flags stay unset so the script's #SBATCH apply.

    Raises:
        ArgumentError: no script and no command, both, conflicting GPU flags, or --export-env of
            a variable that is not set.
    """
    environ = dict(os.environ) if environ is None else environ
    if args.script and args.command_argv:
        raise ArgumentError("give either SCRIPT or '-- COMMAND ...', not both")
    if not args.script and not args.command_argv:
        raise ArgumentError("nothing to run: give an sbatch SCRIPT or '-- COMMAND ...'")
    if args.gres is not None and args.gpus_per_node is not None and args.gres != args.gpus_per_node:
        raise ArgumentError("--gres and --gpus-per-node disagree")

    spec = jobs_pb2.JobSpec(request_id=args.request_id or new_request_id())
    if args.script:
        spec.script = read_script(args.script)
    else:
        spec.command.extend(args.command_argv)
    _set_if(spec, "name", args.job_name)
    _set_if(spec, "nodes", args.nodes)
    _set_if(spec, "tasks_per_node", args.ntasks_per_node)
    _set_if(spec, "gpus_per_node", args.gpus_per_node if args.gpus_per_node is not None else args.gres)
    _set_if(spec, "cpus_per_task", args.cpus_per_task)
    _set_if(spec, "memory_mb_per_node", args.mem)
    _set_if(spec, "time_limit", args.time)
    _set_if(spec, "partition", args.partition)
    _set_if(spec, "account", args.account)
    _set_if(spec, "qos", args.qos)
    _set_if(spec, "working_directory", args.chdir)
    _set_if(spec, "stdout_path", args.output)
    _set_if(spec, "stderr_path", args.error)
    _set_if(spec, "checkpoint_uri", args.checkpoint_uri)

    for name in args.export_env:
        if name not in environ:
            raise ArgumentError(f"--export-env {name}: not set in this environment")
        spec.environment[name] = environ[name]
    for name, value in args.env:  # explicit values win over exported ones
        spec.environment[name] = value

    policy = _restart_policy(args)
    if policy.ListFields():
        spec.restart_policy.CopyFrom(policy)
    placement = placement_from_args(args)
    if placement is not None:
        spec.placement.CopyFrom(placement)
    return spec


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
    return policy


def submit(args: argparse.Namespace) -> int:
    spec = build_spec(args)
    client = args.make_client()
    response = client.submit(spec)
    if args.json:
        render.print_json(render.to_dict(response))
    else:
        render.console().print(render.submitted(response))
    if not args.wait:
        return 0
    job_id = response.job.job_id
    try:
        return wait_for(client, job_id, as_json=args.json)
    except KeyboardInterrupt:
        print(
            f"clusterctl: stopped waiting; job {job_id} keeps going (clusterctl cancel {job_id} stops it)",
            file=sys.stderr,
        )
        return 130
