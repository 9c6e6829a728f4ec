"""Validation of a JobSpec before anything reaches Slurm.

Every rejection is an :class:`~clusterd.errors.InvalidArgument` naming the field, so a client can
point at what to fix. The result is a :class:`ResolvedJob`: the spec merged with the script's
``#SBATCH`` header, which is what placement and sbatch options are computed from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from posixpath import normpath

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.config import LimitsConfig
from clusterd.errors import InvalidArgument
from clusterd.jobs.script import ScriptError, command_script, forbidden_directive, parse_directives

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")  # partitions, accounts, qos, node names, features
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
_TIME_RE = re.compile(
    r"^(?:(?P<d>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<h>\d+):(?P<hm>\d+):(?P<hs>\d+)|(?P<m>\d+)(?::(?P<ms>\d+))?)$"
)
_RESERVED_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "CLUSTERCTL_")
_MAX_NAME = 200
_MAX_COMMAND_ARGS = 1024
_MAX_PATH = 4096
_MAX_TASKS = 1024
_MAX_GPUS = 64
_MAX_CPUS = 4096
_MAX_MEMORY_MB = 64 << 20  # 64 TiB
_MAX_RESTARTS = 1000
_MAX_WAIT_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class ClusterFacts:
    """What validation needs to know about the cluster (from the poller's cache)."""

    partitions: frozenset[str]
    nodes: frozenset[str]
    default_partition: str = ""


@dataclass(frozen=True)
class ResolvedJob:
    """The request as Slurm will see it: spec fields over ``#SBATCH`` lines over defaults."""

    name: str
    script: str
    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    partition: str
    time_limit_seconds: int | None
    directives: dict[str, str] = field(default_factory=dict)


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


def parse_time_limit(text: str) -> int | None:
    """Slurm time syntax to seconds; None for UNLIMITED/INFINITE. Raises ValueError when malformed."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME_RE.match(text)
    if not m:
        raise ValueError(text)
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if "d" in g:
        return g["d"] * 86400 + g["dh"] * 3600 + g.get("dm", 0) * 60 + g.get("ds", 0)
    if "h" in g:
        return g["h"] * 3600 + g["hm"] * 60 + g["hs"]
    return g["m"] * 60 + g.get("ms", 0)


def _count(field_name: str, value: int, maximum: int) -> int:
    if value > maximum:
        raise InvalidArgument(field_name, f"{value} exceeds the maximum of {maximum}")
    return value


def _directive_int(directives: dict[str, str], name: str) -> int | None:
    raw = directives.get(name)
    if raw is None:
        return None
    head = raw.split("-", 1)[0]  # "--nodes=2-4" -> minimum 2
    if not head.isdigit() or int(head) <= 0:
        raise InvalidArgument("spec.script", f"#SBATCH --{name}={raw!r} is not a positive count")
    return int(head)


def _directive_gpus(directives: dict[str, str]) -> int | None:
    if "gpus-per-node" in directives:
        return _directive_int(directives, "gpus-per-node")
    gres = directives.get("gres")
    if gres:
        for item in gres.split(","):
            parts = item.split(":")
            if parts[0] == "gpu":
                count = parts[-1] if len(parts) > 1 else "1"
                if not count.isdigit():
                    raise InvalidArgument("spec.script", f"#SBATCH --gres={gres!r}: bad GPU count")
                return int(count)
    return None


def _validate_script(spec: jobs_pb2.JobSpec, limits: LimitsConfig) -> tuple[str, dict[str, str]]:
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
        script = command_script(list(spec.command))
    else:
        script = spec.script
        size = len(script.encode())
        if size > limits.max_script_bytes:
            raise InvalidArgument("spec.script", f"{size} bytes exceeds the limit of {limits.max_script_bytes}")
        if "\x00" in script:
            raise InvalidArgument("spec.script", "contains a NUL byte")
        if not script.startswith("#!"):
            raise InvalidArgument("spec.script", "must start with an interpreter line such as '#!/bin/bash'")
    try:
        directives = parse_directives(script)
    except ScriptError as exc:
        raise InvalidArgument("spec.script", str(exc)) from exc
    for name in directives:
        forbidden = forbidden_directive(name)
        if forbidden is not None:
            message = f"#SBATCH --{name} (--{forbidden}) is set by the service and not allowed"
            raise InvalidArgument("spec.script", message)
    return script, directives


def _validate_env(spec: jobs_pb2.JobSpec, limits: LimitsConfig) -> None:
    if len(spec.environment) > limits.max_env_vars:
        raise InvalidArgument("spec.environment", f"more than {limits.max_env_vars} variables")
    for name, value in spec.environment.items():
        where = f"spec.environment[{name[:64]!r}]"
        if not _ENV_NAME_RE.match(name):
            raise InvalidArgument(where, "variable names must match [A-Za-z_][A-Za-z0-9_]*")
        if name.startswith(_RESERVED_ENV_PREFIXES):
            raise InvalidArgument(where, f"names starting with {', '.join(_RESERVED_ENV_PREFIXES)} are reserved")
        if len(value.encode()) > limits.max_env_value_bytes:
            raise InvalidArgument(where, f"value exceeds {limits.max_env_value_bytes} bytes")
        if "\x00" in value:
            raise InvalidArgument(where, "value contains a NUL byte")


def _validate_restart(policy: jobs_pb2.RestartPolicy) -> None:
    if policy.HasField("max_restarts"):
        _count("spec.restart_policy.max_restarts", policy.max_restarts, _MAX_RESTARTS)
    for name in ("retryable_exit_codes", "fatal_exit_codes"):
        for code in getattr(policy, name):
            if not 0 < code < 256:
                raise InvalidArgument(f"spec.restart_policy.{name}", f"exit code {code} is not in 1..255")
    both = set(policy.retryable_exit_codes) & set(policy.fatal_exit_codes)
    if both:
        raise InvalidArgument("spec.restart_policy.fatal_exit_codes", f"{sorted(both)} also listed as retryable")
    if policy.HasField("backoff"):
        seconds = policy.backoff.seconds + policy.backoff.nanos / 1e9
        if seconds < 0 or seconds > 86400:
            raise InvalidArgument("spec.restart_policy.backoff", "must be between 0 and 1 day")
    if policy.HasField("no_progress_limit"):
        _count("spec.restart_policy.no_progress_limit", policy.no_progress_limit, _MAX_RESTARTS)
    if policy.HasField("signal_before_timeout_seconds"):
        _count("spec.restart_policy.signal_before_timeout_seconds", policy.signal_before_timeout_seconds, 65535)


def _validate_placement(p: cluster_pb2.PlacementPreference, facts: ClusterFacts, nodes: int) -> None:
    if p.policy not in cluster_pb2.PlacementPolicy.values():
        raise InvalidArgument("spec.placement.policy", f"unknown policy {p.policy}")
    if p.max_wait_seconds > _MAX_WAIT_SECONDS:
        raise InvalidArgument("spec.placement.max_wait_seconds", f"exceeds {_MAX_WAIT_SECONDS} (7 days)")
    if p.policy == cluster_pb2.PLACEMENT_POLICY_EXACT:
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
    if p.nodelist and len(p.nodelist) != nodes:
        raise InvalidArgument("spec.placement.nodelist", f"{len(p.nodelist)} nodes listed for a {nodes}-node job")
    for i, feature in enumerate(p.constraints):
        _check_name(f"spec.placement.constraints[{i}]", feature, "feature")


def validate_spec(spec: jobs_pb2.JobSpec, facts: ClusterFacts, limits: LimitsConfig) -> ResolvedJob:
    """Check every field and merge with the script header. Raises InvalidArgument (field named)."""
    _check_text("spec.name", spec.name)
    if spec.request_id and not _REQUEST_ID_RE.match(spec.request_id):
        raise InvalidArgument("spec.request_id", "must be 1-128 of [A-Za-z0-9_.:-]")
    script, directives = _validate_script(spec, limits)

    nodes = _count("spec.nodes", spec.nodes, limits.max_nodes) or _directive_int(directives, "nodes") or 1
    if nodes > limits.max_nodes:
        raise InvalidArgument("spec.script", f"#SBATCH --nodes={nodes} exceeds the maximum of {limits.max_nodes}")
    tasks = _count("spec.tasks_per_node", spec.tasks_per_node, _MAX_TASKS) or (
        _directive_int(directives, "ntasks-per-node") or 1
    )
    gpus = _count("spec.gpus_per_node", spec.gpus_per_node, _MAX_GPUS) or _directive_gpus(directives) or 0
    cpus = _count("spec.cpus_per_task", spec.cpus_per_task, _MAX_CPUS) or (
        _directive_int(directives, "cpus-per-task") or 1
    )
    _count("spec.memory_mb_per_node", spec.memory_mb_per_node, _MAX_MEMORY_MB)

    time_text = spec.time_limit or directives.get("time", "")
    time_field = "spec.time_limit" if spec.time_limit else "spec.script"
    time_limit: int | None = None
    if time_text:
        try:
            time_limit = parse_time_limit(time_text)
        except ValueError:
            raise InvalidArgument(
                time_field, f"bad time limit {time_text[:40]!r}: use MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]] or UNLIMITED"
            ) from None
        if time_limit == 0:
            raise InvalidArgument(time_field, "time limit must be greater than zero")

    partition = spec.partition or directives.get("partition", "") or facts.default_partition
    part_field = "spec.partition" if spec.partition else "spec.script"
    for part in filter(None, partition.split(",")):
        _check_name(part_field, part, "partition")
        if facts.partitions and part not in facts.partitions:
            known = ", ".join(sorted(facts.partitions))
            raise InvalidArgument(part_field, f"unknown partition {part!r} (known: {known})")
    _check_name("spec.account", spec.account, "account")
    _check_name("spec.qos", spec.qos, "qos")

    _validate_env(spec, limits)
    _check_path("spec.working_directory", spec.working_directory, absolute=True)
    _check_path("spec.stdout_path", spec.stdout_path, absolute=False)
    _check_path("spec.stderr_path", spec.stderr_path, absolute=False)
    _validate_checkpoint_uri(spec.checkpoint_uri)
    _validate_restart(spec.restart_policy)
    _validate_placement(spec.placement, facts, nodes)

    default_name = spec.command[0].rsplit("/", 1)[-1] if spec.command else "job"
    name = spec.name or directives.get("job-name", "") or default_name
    _check_text("spec.name", name)
    return ResolvedJob(
        name=name,
        script=script,
        nodes=nodes,
        tasks_per_node=tasks,
        gpus_per_node=gpus,
        cpus_per_task=cpus,
        partition=partition,
        time_limit_seconds=time_limit,
        directives=directives,
    )


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
