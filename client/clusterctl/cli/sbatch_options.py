"""sbatch's own flags for ``submit``, with sbatch's meanings, and their JobSpec fields.

Each flag is one JobSpec field (see proto/clusterctl/v1/jobs.proto), so what the server gets is
what sbatch would have been told. Unset flags stay unset: the script's ``#SBATCH`` lines decide.
Abbreviations are off for every parser (``CliParser``), so ``--ntasks`` is never
``--ntasks-per-node``. A few sbatch flags the service cannot honour are known by name and refused
with the reason, instead of the generic "unrecognized arguments".
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from clusterctl.cli.options import ArgumentError
from clusterctl.cli.values import (
    argtype,
    array_indexes,
    gres_gpus,
    memory_mb,
    node_range,
    non_negative_int,
    nonblank,
    positive_int,
    time_limit,
    typed_gpus,
)
from clusterctl.v1 import jobs_pb2

# (flags, JobSpec field) for sbatch options whose value is sent as typed, text or count.
_PLAIN: tuple[tuple[tuple[str, ...], str, str, Any, str], ...] = (
    (("-n", "--ntasks"), "ntasks", "N", positive_int, "tasks in all"),
    (("--ntasks-per-node",), "tasks_per_node", "N", positive_int, "tasks on each node"),
    (("-c", "--cpus-per-task"), "cpus_per_task", "N", positive_int, "CPUs for each task"),
    (("--mem",), "memory_mb_per_node", "SIZE", memory_mb, "memory per node: 4G, 512M, 1024 (MB)"),
    (("--mem-per-cpu",), "memory_mb_per_cpu", "SIZE", memory_mb, "memory per CPU (excludes --mem)"),
    (("-t", "--time"), "time_limit", "TIME", time_limit, "time limit: MM, HH:MM:SS, D-HH[:MM[:SS]], or 90m, 2h"),
    (("-p", "--partition"), "partition", "NAME", nonblank, "partition"),
    (("-A", "--account"), "account", "NAME", nonblank, "account to charge"),
    (("-q", "--qos"), "qos", "NAME", nonblank, "quality of service"),
    (("-J", "--job-name"), "name", "NAME", nonblank, "job name (default: the script's file name)"),
    (("-o", "--output"), "stdout_path", "PATH", nonblank, "stdout file; relative to the current directory"),
    (("-e", "--error"), "stderr_path", "PATH", nonblank, "stderr file (default: with stdout)"),
    (("-D", "--chdir"), "working_directory", "DIR", nonblank, "working directory (default: the current one)"),
    (("-a", "--array"), "array", "INDEXES", array_indexes, "job array: 0-9, 1,3,5, 0-15:4, with optional %%N"),
    (("-d", "--dependency"), "dependency", "LIST", nonblank, "afterok:ID[:ID...], afterany:ID, singleton, ..."),
    (("--begin",), "begin", "TIME", nonblank, "start no earlier than: now+1hour, 2026-01-01T10:00, ..."),
    (("--mail-type",), "mail_type", "TYPES", nonblank, "NONE, BEGIN, END, FAIL, ALL, ..."),
    (("--mail-user",), "mail_user", "USER", nonblank, "who gets the mail"),
    (("--reservation",), "reservation", "NAME", nonblank, "run in this reservation"),
    (("--nice",), "nice", "N", non_negative_int, "lower the priority by N (a negative nice is a privilege)"),
)

# sbatch flags clusterctl knows and cannot honour, with the reason given to the caller.
_REFUSED = {
    "--comment": "the service's API has no field for a job comment",
    "--export-file": "it reads a file with the service's rights; use --export or --env",
    "--signal": "the service sends the timeout signal; use --signal-before SECONDS (SIGUSR1 to the batch shell)",
    "--uid": "jobs always run as the caller",
    "--gid": "jobs always run as the caller",
    "--get-user-env": "the caller's environment is sent by --export (ALL by default)",
}


class _Refuse(argparse.Action):
    """A known sbatch flag the service cannot honour: fail naming it and saying why."""

    def __init__(self, option_strings: Sequence[str], dest: str, reason: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)
        self.reason = reason

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        raise ArgumentError(f"{option_string} is not supported by clusterctl submit: {self.reason}")


def add_sbatch_options(p: argparse.ArgumentParser) -> None:
    """sbatch's flags: ``--flag value``, ``--flag=value``, ``-n4`` and ``-n 4`` all work."""
    res = p.add_argument_group("sbatch options (sbatch's meanings; they override the script's #SBATCH)")
    res.add_argument(
        "-N",
        "--nodes",
        metavar="N[-MAX]",
        type=argtype(node_range),
        help="nodes, or a MIN-MAX range",
    )
    for flags, field, metavar, parse, text in _PLAIN:
        res.add_argument(*flags, dest=field, metavar=metavar, type=argtype(parse), help=text)
    res.add_argument("-G", "--gpus", metavar="[TYPE:]N", type=argtype(typed_gpus), help="GPUs for the whole job")
    res.add_argument("--gpus-per-node", metavar="[TYPE:]N", type=argtype(typed_gpus), help="GPUs on each node")
    res.add_argument("--gres", metavar="gpu[:TYPE][:N]", type=argtype(gres_gpus), help="GPUs per node, GRES style")
    res.add_argument("--exclusive", action="store_true", default=None, help="no other jobs on the nodes")
    res.add_argument("-H", "--hold", action="store_true", default=None, help="submit held: pending until released")
    res.add_argument(
        "--wrap",
        metavar="COMMAND",
        help="run this shell string as the batch script (#!/bin/sh), as sbatch --wrap",
    )
    for flag, reason in _REFUSED.items():
        res.add_argument(flag, action=_Refuse, reason=reason)


def apply_sbatch_options(args: argparse.Namespace, spec: jobs_pb2.JobSpec) -> None:
    """Set the JobSpec fields of the sbatch flags given; leave the others unset.

    Raises:
        ArgumentError: flags that contradict each other (as sbatch refuses them).
    """
    if args.nodes is not None:
        spec.nodes, spec.max_nodes = args.nodes
    for _flags, field, _metavar, _parse, _text in _PLAIN:
        value = getattr(args, field)
        if value is not None:
            setattr(spec, field, value)
    if spec.memory_mb_per_node and spec.memory_mb_per_cpu:
        raise ArgumentError("--mem and --mem-per-cpu are mutually exclusive")
    spec.exclusive = bool(args.exclusive)
    spec.hold = bool(args.hold)
    per_node = [g for g in (args.gpus_per_node, args.gres) if g is not None]
    if len({count for _kind, count in per_node}) > 1:
        raise ArgumentError("--gres and --gpus-per-node disagree")
    if per_node:
        spec.gpus_per_node = per_node[0][1]
    if args.gpus is not None:
        spec.gpus = args.gpus[1]
    kinds = {kind for kind, _count in [*per_node, *([args.gpus] if args.gpus else [])] if kind}
    if len(kinds) > 1:
        raise ArgumentError(f"GPU flags name different types: {', '.join(sorted(kinds))}")
    if kinds:
        spec.gpu_type = kinds.pop()


def wrap_script(command: str) -> str:
    """The script sbatch --wrap generates: ``/bin/sh`` running the string."""
    return f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{command}\n"
