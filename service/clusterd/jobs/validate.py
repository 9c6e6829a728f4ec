"""Validation of a JobSpec before anything reaches Slurm: the one place a JobRequest is made.

Every rejection is an :class:`~clusterd.errors.InvalidArgument` naming the field (or the script
line), so a client can point at what to fix. The spec's fields override the script's ``#SBATCH``
lines, as sbatch's command line does; an option with no request field is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from posixpath import normpath
from typing import Any, TypeVar

from clusterctl.hostlist import expand_hostlist
from clusterctl.sbatch import values as sbatch_values
from clusterctl.sbatch.environment import exported_function
from clusterd.config import LimitsConfig
from clusterd.errors import InvalidArgument
from clusterd.jobs import values
from clusterd.jobs.directives import DirectiveError, neutralise, parse_directives
from clusterd.jobs.merged import MAX_CPUS, MAX_GPUS, MAX_MEMORY_MB, MAX_TASKS, Merged, bounded, typed_upto, upto
from clusterd.jobs.sbatch_fields import check_begin, layout, sbatch_options, sharing
from clusterd.jobs.script import command_script
from clusterd.model.spec import CHECKPOINT_TIERS, JobSpec, PlacementPolicy, PlacementPreference, RestartPolicy
from clusterd.slurm.request import ArraySpec, Export, ExportMode, JobRequest, Sharing
from clusterd.slurm.types import ClusterFacts
from clusterd.topology.demand import Preference, node_count

T = TypeVar("T")
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}\Z")  # partitions, accounts, qos, node names, features
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,128}\Z")
_RESERVED_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "CLUSTERCTL_")
_MAX_NAME = 200
_MAX_COMMAND_ARGS = 1024
_MAX_PATH = 4096
_MAX_TASKS = MAX_TASKS
_MAX_GPUS = MAX_GPUS
_MAX_CPUS = MAX_CPUS
_MAX_MEMORY_MB = MAX_MEMORY_MB
_MAX_RESTARTS = 1000
_MAX_WAIT_SECONDS = 7 * 24 * 3600


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def _check_text(field_name: str, value: str, *, max_len: int = _MAX_NAME) -> None:
    if len(value) > max_len:
        raise InvalidArgument(field_name, f"longer than {max_len} characters")
    if _has_control(value):
        raise InvalidArgument(field_name, "contains control characters")


def _check_name(field_name: str, value: str, what: str) -> None:
    if value and not _NAME_RE.match(value):
        raise InvalidArgument(field_name, f"{what} {value[:80]!r} must be 1-64 of [A-Za-z0-9_.-]")


def _check_path(field_name: str, value: str, *, absolute: bool) -> None:
    if not value:
        return
    _check_text(field_name, value, max_len=_MAX_PATH)
    if absolute and not value.startswith("/"):
        raise InvalidArgument(field_name, f"must be an absolute path, got {value[:80]!r}")
    if ".." in value.split("/"):
        raise InvalidArgument(field_name, "must not contain '..' components")


def _count(field_name: str, value: int, maximum: int) -> int:
    if value > maximum:
        raise InvalidArgument(field_name, f"{value} exceeds the maximum of {maximum}")
    return value


def _validate_env(spec: JobSpec, limits: LimitsConfig) -> None:
    if len(spec.environment) > limits.max_env_vars:
        raise InvalidArgument("spec.environment", f"more than {limits.max_env_vars} variables")
    for name, value in spec.environment.items():
        where = f"spec.environment[{name[:64]!r}]"
        if not values.env_name_ok(name) and exported_function(name, value) is None:
            raise InvalidArgument(
                where,
                "variable names must match [A-Za-z_][A-Za-z0-9_]* (or be an exported "
                "bash function: BASH_FUNC_name%% holding '() { ... }')",
            )
        if name.startswith(_RESERVED_ENV_PREFIXES):
            raise InvalidArgument(where, f"names starting with {', '.join(_RESERVED_ENV_PREFIXES)} are reserved")
        if len(value.encode()) > limits.max_env_value_bytes:
            raise InvalidArgument(where, f"value exceeds {limits.max_env_value_bytes} bytes")
        if "\x00" in value:
            raise InvalidArgument(where, "value contains a NUL byte")


def _validate_restart(policy: RestartPolicy) -> None:
    if policy.max_restarts is not None:
        _count("spec.restart_policy.max_restarts", policy.max_restarts, _MAX_RESTARTS)
    for name in ("retryable_exit_codes", "fatal_exit_codes"):
        for code in getattr(policy, name):
            if not 0 < code < 256:
                raise InvalidArgument(f"spec.restart_policy.{name}", f"exit code {code} is not in 1..255")
    both = set(policy.retryable_exit_codes) & set(policy.fatal_exit_codes)
    if both:
        raise InvalidArgument("spec.restart_policy.fatal_exit_codes", f"{sorted(both)} also listed as retryable")
    if policy.backoff_seconds is not None and not 0 <= policy.backoff_seconds <= 86400:
        raise InvalidArgument("spec.restart_policy.backoff", "must be between 0 and 1 day")
    if policy.no_progress_limit is not None:
        _count("spec.restart_policy.no_progress_limit", policy.no_progress_limit, _MAX_RESTARTS)
    if policy.signal_before_timeout_seconds is not None:
        _count("spec.restart_policy.signal_before_timeout_seconds", policy.signal_before_timeout_seconds, 65535)
    # Heartbeats cost the service a call per rank per interval: no faster than 10 per second.
    for name, low, high, words in (
        ("heartbeat_interval", 0.1, 300.0, "0.1 s and 5 minutes"),
        ("hang_timeout", 1.0, 86400.0, "1 s and 1 day"),
    ):
        seconds = getattr(policy, f"{name}_seconds")
        if seconds is not None and not low <= seconds <= high:
            raise InvalidArgument(f"spec.restart_policy.{name}", f"must be between {words}")


def placement_preference(p: PlacementPreference) -> Preference:
    """The caller's placement preference as the placer takes it (a submit's is validated first, by
    :func:`validate_spec`)."""
    return Preference(
        policy=p.policy.planned,
        max_wait_seconds=p.max_wait_seconds or None,
        switch_count=p.switch_count or None,
        exclude_nodes=tuple(p.exclude_nodes),
        nodelist=tuple(p.nodelist),
    )


def _validate_placement(p: PlacementPreference, facts: ClusterFacts, res: dict[str, Any]) -> None:
    most = res["max_nodes"] or res["nodes"]
    nodes = node_count(res["nodes"], res["max_nodes"], tuple(p.nodelist))
    if p.max_wait_seconds > _MAX_WAIT_SECONDS:
        raise InvalidArgument("spec.placement.max_wait_seconds", f"exceeds {_MAX_WAIT_SECONDS} (7 days)")
    if p.policy is PlacementPolicy.EXACT:
        if p.switch_count == 0:
            raise InvalidArgument("spec.placement.switch_count", "must be at least 1 with policy EXACT")
        if p.switch_count > nodes:
            raise InvalidArgument("spec.placement.switch_count", f"{p.switch_count} switches for {nodes} nodes")
    for list_name in ("exclude_nodes", "nodelist"):
        for i, node in enumerate(getattr(p, list_name)):
            where = f"spec.placement.{list_name}[{i}]"
            _check_name(where, node, "node name")
            if not node:
                raise InvalidArgument(where, "empty node name")
            if facts.nodes and node not in facts.nodes:
                raise InvalidArgument(where, f"unknown node {node!r}")
    if set(p.exclude_nodes) & set(p.nodelist):
        raise InvalidArgument("spec.placement.nodelist", "a node is both requested and excluded")
    if most is not None and len(set(p.nodelist)) > most:  # fewer is fine: Slurm adds nodes, as to sbatch -w
        raise InvalidArgument("spec.placement.nodelist", f"{len(set(p.nodelist))} nodes listed for a {most}-node job")
    for i, feature in enumerate(p.constraints):
        _check_name(f"spec.placement.constraints[{i}]", feature, "feature")


_MAX_ARRAY_TASKS = sbatch_values.MAX_ARRAY_TASKS
_MAX_NICE = 2147483645  # Slurm's NICE_OFFSET - 3


def _spec_value(field_name: str, text: str, reader: Callable[[str], T]) -> T:
    try:
        return reader(text)
    except ValueError as exc:
        raise InvalidArgument(field_name, str(exc)) from None


def _script_body(spec: JobSpec, limits: LimitsConfig) -> str:
    if spec.script and spec.command:
        raise InvalidArgument("spec.command", "give either a script or a command, not both")
    if not spec.script and not spec.command:
        raise InvalidArgument("spec.script", "a script or a command is required")
    if spec.command:
        if len(spec.command) > _MAX_COMMAND_ARGS:
            raise InvalidArgument("spec.command", f"more than {_MAX_COMMAND_ARGS} arguments")
        for i, arg in enumerate(spec.command):
            if "\x00" in arg:
                raise InvalidArgument(f"spec.command[{i}]", "contains a NUL byte")
        if not spec.command[0]:
            raise InvalidArgument("spec.command[0]", "the program name is empty")
        return command_script(list(spec.command), relaunched=spec.spare_nodes > 0)
    script = spec.script
    size = len(script.encode())
    if size > limits.max_script_bytes:
        raise InvalidArgument("spec.script", f"{size} bytes exceeds the limit of {limits.max_script_bytes}")
    if "\x00" in script:
        raise InvalidArgument("spec.script", "contains a NUL byte")
    if not script.startswith("#!"):
        raise InvalidArgument("spec.script", "must start with an interpreter line such as '#!/bin/bash'")
    if "\r\n" in script:  # sbatch's own check, for every backend: slurmrestd would take it, and bash trips on \r
        lineno = script.count("\n", 0, script.index("\r\n")) + 1
        raise InvalidArgument(
            "spec.script",
            f"script line {lineno}: DOS line breaks (\\r\\n), which sbatch "
            "refuses too; convert the script with dos2unix",
        )
    return script


def _plain(_field: str, _value: str) -> None:
    _check_text(_field, _value)


def _resources(spec: JobSpec, m: Merged, limits: LimitsConfig) -> dict[str, Any]:
    nodes: int | None
    max_nodes: int | None
    if spec.nodes:
        nodes = _count("spec.nodes", spec.nodes, limits.max_nodes)
        max_nodes = _count("spec.max_nodes", spec.max_nodes, limits.max_nodes) or None
        if max_nodes is not None and max_nodes < nodes:
            raise InvalidArgument("spec.max_nodes", f"{max_nodes} is below spec.nodes ({nodes})")
    else:
        nodes, max_nodes = m.read("nodes", values.node_range) or (None, None)
        for n in (nodes, max_nodes):
            if n is not None and n > limits.max_nodes:
                d = m.values["nodes"]
                raise InvalidArgument(d.field, f"{d.where}: more than {limits.max_nodes} nodes")
    gpu_type = spec.gpu_type
    gpus_per_node: int | None = _count("spec.gpus_per_node", spec.gpus_per_node, _MAX_GPUS) or None
    if gpus_per_node is None:
        typed = m.read("gpus-per-node", typed_upto(values.gpus, _MAX_GPUS)) or m.read(
            "gres", typed_upto(values.gres_gpus, _MAX_GPUS)
        )
        if typed is not None:
            gpu_type = gpu_type or typed[0]
            gpus_per_node = typed[1]
    gpus: int | None = _count("spec.gpus", spec.gpus, _MAX_GPUS * limits.max_nodes) or None
    if gpus is None:
        typed = m.read("gpus", typed_upto(values.gpus, _MAX_GPUS * limits.max_nodes))
        if typed is not None:
            gpu_type = gpu_type or typed[0]
            gpus = typed[1]
    if gpu_type:
        _check_name("spec.gpu_type", gpu_type, "GPU type")
    return {
        "nodes": nodes,
        "max_nodes": max_nodes,
        "ntasks": _count("spec.ntasks", spec.ntasks, _MAX_TASKS * limits.max_nodes)
        or m.read("ntasks", upto(values.count, _MAX_TASKS * limits.max_nodes)),
        "tasks_per_node": _count("spec.tasks_per_node", spec.tasks_per_node, _MAX_TASKS)
        or m.read("ntasks-per-node", upto(values.count, _MAX_TASKS)),
        "cpus_per_task": _count("spec.cpus_per_task", spec.cpus_per_task, _MAX_CPUS)
        or m.read("cpus-per-task", upto(values.count, _MAX_CPUS)),
        "gpus": gpus,
        "gpus_per_node": gpus_per_node,
        "gpu_type": gpu_type,
        "memory_mb_per_node": _count("spec.memory_mb_per_node", spec.memory_mb_per_node, _MAX_MEMORY_MB)
        or m.read("mem", upto(sbatch_values.node_memory, _MAX_MEMORY_MB)),
        "memory_mb_per_cpu": _count("spec.memory_mb_per_cpu", spec.memory_mb_per_cpu, _MAX_MEMORY_MB)
        or m.read("mem-per-cpu", upto(values.megabytes, _MAX_MEMORY_MB)),
    }


def _time(spec: JobSpec, m: Merged) -> tuple[int | None, bool]:
    """(seconds, unlimited); (None, False) when no limit was asked for."""
    if spec.time_limit:
        seconds = _spec_value("spec.time_limit", spec.time_limit, values.time_limit)
        return seconds, seconds is None
    if m.get("time") is None:
        return None, False
    seconds = m.read("time", values.time_limit)
    return seconds, seconds is None


def _paths(spec: JobSpec, m: Merged) -> dict[str, Any]:
    submit_dir = spec.submit_directory
    _check_path("spec.submit_directory", submit_dir, absolute=True)
    chdir = m.text(
        "chdir", spec.working_directory, "spec.working_directory", lambda f, v: _check_path(f, v, absolute=False)
    )
    if chdir and not chdir.startswith("/") and submit_dir:
        chdir = normpath(f"{submit_dir}/{chdir}")  # else relative to the job directory (settled later)
    return {
        "submit_directory": submit_dir,
        "working_directory": chdir,
        "stdout": m.text(
            "output", spec.stdout_path, "spec.stdout_path", lambda f, v: _check_path(f, v, absolute=False)
        ),
        "stderr": m.text("error", spec.stderr_path, "spec.stderr_path", lambda f, v: _check_path(f, v, absolute=False)),
        "stdin": m.text("input", "", "spec.sbatch_options", lambda f, v: _check_path(f, v, absolute=False)),
    }


def _export(spec: JobSpec, m: Merged, limits: LimitsConfig) -> Export:
    _validate_env(spec, limits)
    env = dict(spec.environment)
    if spec.export is not None:
        result = _spec_value("spec.export", spec.export, lambda t: values.export(t, env))
        where = "spec.export"
    else:
        result = m.read("export", lambda t: values.export(t, env)) or Export(ExportMode.ALL, env)
        where = "spec.script"
    for name, value in result.variables.items():
        if name.startswith(_RESERVED_ENV_PREFIXES):
            raise InvalidArgument(
                where, f"--export {name}: names starting with {', '.join(_RESERVED_ENV_PREFIXES)} are reserved"
            )
        if len(value.encode()) > limits.max_env_value_bytes or "\x00" in value:
            raise InvalidArgument(where, f"--export {name}: value too long or contains a NUL byte")
    return result


def _hosts(m: Merged, option: str, facts: ClusterFacts, limits: LimitsConfig) -> tuple[str, ...]:
    """A script's ``--nodelist``/``--exclude``, checked like spec.placement's lists."""
    names = tuple(m.read(option, lambda text: _hostlist(text, limits.max_nodes)) or ())
    d = m.values.get(option)
    for name in names:
        where, field_name = (d.where, d.field) if d else (option, "spec.script")
        if not name or not _NAME_RE.match(name):
            raise InvalidArgument(field_name, f"{where}: node name {name[:80]!r} must be 1-64 of [A-Za-z0-9_.-]")
        if facts.nodes and name not in facts.nodes:
            raise InvalidArgument(field_name, f"{where}: unknown node {name!r}")
    return names


_TOP_COMMA = re.compile(r",(?![^\[]*\])")  # a comma outside brackets
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?\Z")


def _hostlist_size(text: str) -> int:
    """How many names ``text`` expands to, counted without expanding (malformed parts count 1)."""
    total = 0
    for item in _TOP_COMMA.split(text):
        size = 1
        for group in _BRACKET.findall(item):
            ranges = [_RANGE.match(part) for part in group.split(",")]
            size *= sum(int(r.group(2) or r.group(1)) - int(r.group(1)) + 1 if r else 1 for r in ranges)
        total += size
    return total


def _hostlist(text: str, limit: int) -> list[str]:
    """Expand ``text`` only when its size (counted from its ranges first) is at most ``limit`` names."""
    if _hostlist_size(text) > limit:
        raise ValueError(f"more than {limit} nodes")
    return expand_hostlist(text)


def validate_spec(spec: JobSpec, facts: ClusterFacts, limits: LimitsConfig) -> JobRequest:
    """Check every field, read the script's directives, and make the one request Slurm will see.

    The request has no user or placement yet, and only the user's own comment (the manager adds the
    user and the record's tag after the comment); its script is the
    caller's with directive lines neutralised. Raises InvalidArgument naming the field or line.
    """
    _check_text("spec.name", spec.name)
    if spec.request_id and not _REQUEST_ID_RE.match(spec.request_id):
        raise InvalidArgument("spec.request_id", "must be 1-128 of [A-Za-z0-9_.:-]")
    script = _script_body(spec, limits)
    forwarded = sbatch_options(spec)
    ignore_pbs = any(d.option == "ignore-pbs" for d in forwarded)
    try:
        directives = parse_directives(script, release=facts.slurm_release, ignore_pbs=ignore_pbs)
    except DirectiveError as exc:
        raise InvalidArgument("spec.script", str(exc)) from None
    m = Merged(directives + forwarded)
    res = _resources(spec, m, limits)
    seconds, unlimited = _time(spec, m)

    partition = m.text("partition", spec.partition, "spec.partition", _plain) or facts.default_partition
    part_field = "spec.partition" if spec.partition else "spec.script"
    for part in filter(None, partition.split(",")):
        _check_name(part_field, part, "partition")
        if facts.partitions and part not in facts.partitions:
            known = ", ".join(sorted(facts.partitions))
            raise InvalidArgument(part_field, f"unknown partition {part!r} (known: {known})")
    account = m.text("account", spec.account, "spec.account", lambda f, v: _check_name(f, v, "account"))
    qos = m.text("qos", spec.qos, "spec.qos", lambda f, v: _check_name(f, v, "qos"))
    reservation = m.text(
        "reservation", spec.reservation, "spec.reservation", lambda f, v: _check_name(f, v, "reservation")
    )
    constraint = m.text(
        "constraint", spec.constraint or "&".join(spec.placement.constraints), "spec.constraint", _check_constraint
    )
    array: ArraySpec | None
    if spec.array:
        array = _spec_value("spec.array", spec.array, lambda t: values.array(t, _MAX_ARRAY_TASKS))
    else:
        array = m.read("array", lambda t: values.array(t, _MAX_ARRAY_TASKS))
    nice = _count("spec.nice", spec.nice, _MAX_NICE)
    if not nice and (d := m.get("nice")) is not None:
        # sbatch: --nice without a value is 100; a negative nice is a privilege, refused here
        nice = 100 if d.value is None else m.read("nice", lambda v: bounded(values.non_negative(v), _MAX_NICE)) or 0
    mail_type = m.text("mail-type", spec.mail_type, "spec.mail_type", _check_mail_type)

    _check_path("spec.stdout_path", spec.stdout_path, absolute=False)
    _validate_checkpoint_uri(spec.checkpoint_uri)
    if spec.checkpoint_tier not in CHECKPOINT_TIERS:
        raise InvalidArgument("spec.checkpoint_tier", f"{spec.checkpoint_tier[:40]!r}: expected 'memory' or empty")
    _validate_restart(spec.restart_policy)
    _validate_placement(spec.placement, facts, res)

    default_name = spec.script_name.rsplit("/", 1)[-1] if spec.script_name else "job"
    if spec.command:
        default_name = spec.command[0].rsplit("/", 1)[-1]
    name = m.text("job-name", spec.name, "spec.name", _plain) or default_name
    _check_text("spec.name", name)
    request = JobRequest(
        script=neutralise(script),
        name=name,
        user="",
        partition=partition,
        account=account,
        qos=qos,
        reservation=reservation,
        time_limit_seconds=seconds,
        time_unlimited=unlimited,
        constraint=constraint,
        nodelist=_hosts(m, "nodelist", facts, limits),
        exclude=_hosts(m, "exclude", facts, limits),
        switches=m.read("switches", values.switches),
        array=array,
        dependency=m.text("dependency", spec.dependency, "spec.dependency", _check_dependency),
        begin=m.text("begin", spec.begin, "spec.begin", check_begin),
        hold=spec.hold or m.get("hold") is not None,
        sharing=Sharing.EXCLUSIVE if spec.exclusive else sharing(m),
        requeue=m.last_of("requeue", "no-requeue") != "no-requeue",
        open_append=m.read("open-mode", lambda t: sbatch_values.choice(t, ("append", "truncate"), "--open-mode"))
        != "truncate",
        mail_type=tuple(t for t in mail_type.split(",") if t),
        mail_user=m.text("mail-user", spec.mail_user, "spec.mail_user", _check_mail_user),
        nice=nice,
        signal=m.read("signal", values.signal),
        export=_export(spec, m, limits),
        **_paths(spec, m),
        **{**res, **layout(m, res["gpu_type"])},
    )
    return _with_spares(spec, request, limits)


def _with_spares(spec: JobSpec, request: JobRequest, limits: LimitsConfig) -> JobRequest:
    """--spare-nodes K: N+K nodes held with --no-kill, so that a node's death leaves the job running
    and its srun steps can be started again on the survivors and a spare (clusterd.jobs.script)."""
    if not spec.spare_nodes:
        return request
    spares = _count("spec.spare_nodes", spec.spare_nodes, limits.max_nodes)
    if request.nodes is None:
        raise InvalidArgument("spec.spare_nodes", "needs a node count (spec.nodes or #SBATCH -N)")
    if request.max_nodes is not None and request.max_nodes != request.nodes:
        raise InvalidArgument("spec.spare_nodes", "cannot be combined with a node range (-N MIN-MAX)")
    if request.array is not None:
        raise InvalidArgument("spec.spare_nodes", "cannot be combined with an array")
    if "bash" not in request.script.split("\n", 1)[0]:
        raise InvalidArgument("spec.spare_nodes", "needs a bash batch script (its srun lines are relaunched)")
    if request.nodes + spares > limits.max_nodes:
        raise InvalidArgument("spec.spare_nodes", f"{request.nodes} + {spares} nodes exceeds {limits.max_nodes}")
    return replace(request, nodes=request.nodes + spares, max_nodes=None, no_kill=True)


_CONSTRAINT_RE = re.compile(r"[A-Za-z0-9_.\-&|()\[\]*:,!]{1,1024}\Z")
_DEPENDENCY_RE = re.compile(
    r"(?:singleton|(?:after|afterany|afterok|afternotok|afterburstbuffer|aftercorr)"
    r"(?::[0-9]+(?:_[0-9]+)?(?:\+[0-9]+)?)+)(?:[,?](?:singleton|[a-z]+(?::[0-9_+]+)+))*\Z"
)
_MAIL_TYPES = frozenset(
    [
        "NONE",
        "BEGIN",
        "END",
        "FAIL",
        "REQUEUE",
        "ALL",
        "INVALID_DEPEND",
        "STAGE_OUT",
        "TIME_LIMIT",
        "TIME_LIMIT_90",
        "TIME_LIMIT_80",
        "TIME_LIMIT_50",
        "ARRAY_TASKS",
    ]
)
_MAIL_USER_RE = re.compile(r"[A-Za-z0-9_.+\-]{1,64}(?:@[A-Za-z0-9.\-]{1,190})?\Z")


def _check_constraint(field_name: str, value: str) -> None:
    if not _CONSTRAINT_RE.match(value):
        raise InvalidArgument(field_name, f"bad constraint {value[:80]!r}")


def _check_dependency(field_name: str, value: str) -> None:
    if not _DEPENDENCY_RE.match(value):
        raise InvalidArgument(field_name, f"bad dependency {value[:80]!r}: use TYPE:JOBID[:JOBID...] or singleton")


def _check_mail_type(field_name: str, value: str) -> None:
    for item in value.split(","):
        if item.upper() not in _MAIL_TYPES:
            raise InvalidArgument(field_name, f"unknown mail type {item[:40]!r}")


def _check_mail_user(field_name: str, value: str) -> None:
    if not _MAIL_USER_RE.match(value):
        raise InvalidArgument(field_name, f"bad mail address {value[:80]!r}")


def _validate_checkpoint_uri(uri: str) -> None:
    if not uri:
        return
    _check_text("spec.checkpoint_uri", uri, max_len=_MAX_PATH)
    if uri.startswith("s3://"):
        bucket, _, prefix = uri[5:].partition("/")
        if not re.match(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$", bucket):
            raise InvalidArgument("spec.checkpoint_uri", f"bad S3 bucket name {bucket[:80]!r}")
        path = prefix
    elif uri.startswith("file://"):
        path = uri[7:]
        if not path.startswith("/"):
            raise InvalidArgument("spec.checkpoint_uri", "file:// URIs need an absolute path (file:///...)")
    elif uri.startswith("/"):
        path = uri
    else:
        raise InvalidArgument("spec.checkpoint_uri", "must be s3://bucket/prefix, file:///path or an absolute path")
    if ".." in path.split("/") or "\\" in path:
        raise InvalidArgument("spec.checkpoint_uri", "must not contain '..' or backslashes")
    if path and normpath(path) != path.rstrip("/") and path.rstrip("/") != "":
        raise InvalidArgument("spec.checkpoint_uri", "path must be normalized (no '//' or '.')")
