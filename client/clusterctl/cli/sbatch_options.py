"""sbatch's own flags for ``submit``, with sbatch's meanings, and their JobSpec fields.

Flags with a typed JobSpec field (see proto/clusterctl/v1/jobs.proto) set it; the other options
of sbatch's table travel in ``spec.sbatch_options`` in sbatch's syntax, after the ones
``SBATCH_*`` variables stand for, so the command line wins over the environment, which wins over
the script's ``#SBATCH`` lines, as with sbatch. Values are checked here with the parser the
service reads them with (:mod:`clusterctl.sbatch`), so a bad one is a usage error (exit 2) before
anything is sent. Unset flags stay unset. Abbreviations are off for every parser (``CliParser``),
so ``--ntasks`` is never ``--ntasks-per-node``. sbatch flags the service refuses are known by
name and refused with the reason, instead of the generic "unrecognized arguments".
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from clusterctl.cli.options import ArgumentError
from clusterctl.cli.values import (
    argtype,
    array_indexes,
    gres_gpus,
    memory_mb,
    node_memory_mb,
    node_range,
    non_negative_int,
    nonblank,
    positive_int,
    time_limit,
    typed_gpus,
)
from clusterctl.sbatch import values as sv
from clusterctl.sbatch.environment import options_from_environment
from clusterctl.sbatch.options import REFUSED, OptionError, RefusedOption, allowed_options
from clusterctl.v1 import jobs_pb2

# (flags, JobSpec field) for sbatch options whose value is sent as typed, text or count.
_PLAIN: tuple[tuple[tuple[str, ...], str, str, Any, str], ...] = (
    (("-n", "--ntasks"), "ntasks", "N", positive_int, "tasks in all"),
    (("--ntasks-per-node",), "tasks_per_node", "N", positive_int, "tasks on each node"),
    (("-c", "--cpus-per-task"), "cpus_per_task", "N", positive_int, "CPUs for each task"),
    (("--mem",), "memory_mb_per_node", "SIZE", node_memory_mb, "memory per node: 4G, 512M, 1024 (MB); 0: all of it"),
    (("--mem-per-cpu",), "memory_mb_per_cpu", "SIZE", memory_mb, "memory per CPU (excludes --mem)"),
    (("-t", "--time"), "time_limit", "TIME", time_limit, "MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]], UNLIMITED"),
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


def _choice(*choices: str) -> Callable[[str], str]:
    return lambda text: sv.choice(text, choices, "value")


# sbatch options with no typed JobSpec field: (flags, metavar or None for a flag, check, help).
_FORWARDED: tuple[tuple[tuple[str, ...], str | None, Callable[[str], object] | None, str], ...] = (
    (("--gpus-per-task",), "[TYPE:]N", sv.gpus, "GPUs for each task"),
    (("--cpus-per-gpu",), "N", sv.count, "CPUs for each GPU"),
    (("--mem-per-gpu",), "SIZE", sv.megabytes, "memory for each GPU"),
    (("--ntasks-per-gpu",), "N", sv.count, "tasks for each GPU"),
    (("--ntasks-per-core",), "N", sv.count, "tasks on each core"),
    (("--gpu-bind",), "BIND", sv.gpu_bind, "closest, none, single:N, per_task:N, map_gpu:..., mask_gpu:..."),
    (("--gres-flags",), "FLAG", _choice("enforce-binding", "disable-binding"), "enforce-binding, disable-binding"),
    (
        ("--hint",),
        "HINT",
        _choice("compute_bound", "memory_bound", "multithread", "nomultithread"),
        "compute_bound, memory_bound, multithread, nomultithread",
    ),
    (("-m", "--distribution"), "DIST", sv.distribution, "task distribution: block, cyclic:block, plane=N, ..."),
    (("-B", "--extra-node-info"), "S[:C[:T]]", sv.extra_node_info, "sockets per node, cores per socket, threads"),
    (("--sockets-per-node",), "N", sv.count, "sockets on each node"),
    (("--cores-per-socket",), "N", sv.count, "cores on each socket"),
    (("--threads-per-core",), "N", sv.count, "threads on each core"),
    (("--mincpus",), "N", sv.count, "at least N CPUs on each node"),
    (("--deadline",), "TIME", None, "remove the job if it cannot end by then (--begin's syntax)"),
    (("--time-min",), "TIME", sv.finite_time, "the least time limit it may be started with"),
    (("--wckey",), "KEY", sv.name, "workload characterization key"),
    (("--comment",), "TEXT", sv.comment, "a comment of yours on the job, as squeue/sacct show it"),
    (("--open-mode",), "MODE", _choice("append", "truncate"), "append or truncate the output files"),
    (("--kill-on-invalid-dep",), "yes|no", _choice("yes", "no"), "end the job when its dependency cannot be met"),
    (
        ("--signal",),
        "[R|B:]SIG[@TIME]",
        None,
        "send SIG this long before the time limit (B: the batch shell only; R: before the reservation ends)",
    ),
    (("-i", "--input"), "PATH", None, "the file the batch script reads on stdin (relative: to the working directory)"),
    (("--tmp",), "SIZE", sv.megabytes, "scratch disk on each node"),
    (("--ntasks-per-socket",), "N", sv.count, "tasks on each socket"),
    (("--gpus-per-socket",), "[TYPE:]N", sv.gpus, "GPUs on each socket"),
    (("--delay-boot",), "TIME", sv.finite_time, "wait this long before rebooting nodes for the job's features"),
    (("--wait-all-nodes",), "0|1", _choice("0", "1"), "start the script only when every node is ready"),
    (("--mem-bind",), "BIND", sv.mem_bind, "memory binding: local, rank, map_mem:..., ..."),
    (("--acctg-freq",), "FREQ", sv.acctg_freq, "accounting sampling: SECONDS or task=30,energy=0,..."),
    (("-L", "--licenses"), "LIST", sv.licenses, "licenses: NAME[:COUNT][,...]"),
    (("--batch",), "FEATURES", sv.features, "features the batch host must have (a subset of --constraint)"),
    (("-O", "--overcommit"), None, None, "more tasks than CPUs"),
    (("-k", "--no-kill"), None, None, "keep running when an allocated node fails (--no-kill=off: the default)"),
    (("--use-min-nodes",), None, None, "of a node range, prefer the smaller count"),
    (("--exclusive",), None, None, "no other jobs on the nodes (--exclusive=user, --exclusive=mcs too)"),
    (("-s", "--oversubscribe"), None, None, "the job's resources may be shared with other jobs"),
    (("--contiguous",), None, None, "contiguous nodes"),
    (("--spread-job",), None, None, "spread the job over as many nodes as it may"),
    (("--requeue",), None, None, "the job may be requeued (the default)"),
    (("--no-requeue",), None, None, "never requeue the job: no automatic restart either"),
    (("--ignore-pbs",), None, None, "do not translate the script's #PBS and #BSUB lines"),
)
# Optional values, registered whole so that "--exclusive SCRIPT" stays a flag, as with getopt.
_WHOLE = ("--exclusive=user", "--exclusive=mcs", "--no-kill=off")
# sbatch flags clusterctl knows and the service refuses: the reason is the table's.
_REFUSED = ("--export-file", "--uid", "--gid", "--get-user-env")


class _Forward(argparse.Action):
    """Append the option, in sbatch's syntax, to ``sbatch_options`` (command-line order kept)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        check: Callable[[str], object] | None = None,
        long_name: str = "",
        fixed: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.check = check
        self.long_name = long_name
        self.fixed = fixed

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        given = list(getattr(namespace, self.dest, None) or [])
        if isinstance(values, list):  # a flag (nargs=0)
            given.append(self.fixed or f"--{self.long_name}")
        else:
            if self.check is not None:
                try:
                    self.check(values)
                except ValueError as exc:
                    raise ArgumentError(f"argument {option_string}: {exc}") from None
            given.append(f"--{self.long_name}={values}")
        setattr(namespace, self.dest, given)


class _Refuse(argparse.Action):
    """A known sbatch flag the service refuses: fail naming it and saying why."""

    def __init__(self, option_strings: Sequence[str], dest: str, reason: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)
        self.reason = reason

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        raise ArgumentError(f"{option_string} is not allowed: {self.reason}")


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
    res.add_argument("-H", "--hold", action="store_true", default=None, help="submit held: pending until released")
    res.add_argument(
        "--wrap",
        metavar="COMMAND",
        help="run this shell string as the batch script (#!/bin/sh), as sbatch --wrap",
    )
    p.set_defaults(sbatch_options=[])
    for fwd_flags, value_name, check, fwd_help in _FORWARDED:
        nargs: dict[str, Any] = {"nargs": 0} if value_name is None else {"metavar": value_name}
        res.add_argument(
            *fwd_flags,
            dest="sbatch_options",
            action=_Forward,
            check=check,
            long_name=fwd_flags[-1][2:],
            help=fwd_help,
            **nargs,
        )
    for whole in _WHOLE:
        res.add_argument(whole, dest="sbatch_options", action=_Forward, nargs=0, fixed=whole, help=argparse.SUPPRESS)
    for flag in _REFUSED:
        res.add_argument(flag, action=_Refuse, reason=REFUSED[flag[2:]])


def apply_sbatch_options(
    args: argparse.Namespace, spec: jobs_pb2.JobSpec, environ: Mapping[str, str] | None = None
) -> None:
    """Set the JobSpec fields of the sbatch flags given, and ``sbatch_options``: the options
    ``SBATCH_*`` variables stand for, then the command line's; leave the others unset.

    Raises:
        ArgumentError: flags that contradict each other (as sbatch refuses them), or an
            ``SBATCH_*`` variable whose option is refused or malformed (naming the variable).
    """
    spec.sbatch_options.extend([*environment_options(environ or {}), *args.sbatch_options])
    if args.nodes is not None:
        spec.nodes, spec.max_nodes = args.nodes
    for _flags, field, _metavar, _parse, _text in _PLAIN:
        value = getattr(args, field)
        if value is not None:
            setattr(spec, field, value)
    if args.memory_mb_per_node == 0:  # --mem=0 (all of each node's memory): 0 is "unset" in the proto field
        spec.sbatch_options.append("--mem=0")
    if spec.memory_mb_per_node and spec.memory_mb_per_cpu:
        raise ArgumentError("--mem and --mem-per-cpu are mutually exclusive")
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


def environment_options(environ: Mapping[str, str]) -> list[str]:
    """The options ``SBATCH_*`` variables stand for, read here with the service's parser so that a
    refusal names the variable (``SBATCH_EXPORT`` is applied by ``--export``'s own handling)."""
    out: list[str] = []
    for variable, option in options_from_environment(environ):
        if variable == "SBATCH_EXPORT":
            continue
        try:
            parsed = allowed_options([option])
        except RefusedOption as exc:
            raise ArgumentError(f"{variable} stands for --{exc.option}, which is not allowed: {exc.reason}") from None
        except OptionError as exc:
            raise ArgumentError(f"{variable}={environ.get(variable, '')!r}: {exc}") from None
        for o in parsed:
            check = _VALUE_CHECKS.get(o.name)
            if check is not None and o.value is not None:
                try:
                    check(o.value)
                except ValueError as exc:
                    raise ArgumentError(f"{variable}: {exc}") from None
        out.append(option)
    return out


def _value_checks() -> dict[str, Callable[[str], object]]:
    """Long option -> the check its command-line flag's value gets (the shared parsers)."""
    checks: dict[str, Callable[[str], object]] = {
        "nodes": node_range,
        "gpus": typed_gpus,
        "gpus-per-node": typed_gpus,
        "gres": gres_gpus,
    }
    for flags, _field, _metavar, parse, _text in _PLAIN:
        checks[flags[-1][2:]] = parse
    for fwd_flags, _value_name, check, _help in _FORWARDED:
        if check is not None:
            checks[fwd_flags[-1][2:]] = check
    return checks


_VALUE_CHECKS = _value_checks()
