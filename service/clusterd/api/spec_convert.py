"""JobSpec between the wire (clusterctl.v1) and the service's model: the one place they meet.

Lossless both ways for every spec the service accepts, so ``GetJob`` shows the spec as submitted
(with the values the service resolved) and a retried submission compares equal to the first.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.duration_pb2 import Duration

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.errors import InvalidArgument
from clusterd.model.spec import JobSpec, PlacementPolicy, PlacementPreference, RestartPolicy

_POLICIES = {
    cluster_pb2.PLACEMENT_POLICY_UNSPECIFIED: PlacementPolicy.UNSPECIFIED,
    cluster_pb2.PLACEMENT_POLICY_PACK: PlacementPolicy.PACK,
    cluster_pb2.PLACEMENT_POLICY_ANY: PlacementPolicy.ANY,
    cluster_pb2.PLACEMENT_POLICY_EXACT: PlacementPolicy.EXACT,
}
_WIRE_POLICIES = {model: wire for wire, model in _POLICIES.items()}

# Optional scalars of RestartPolicy that keep their name and type in the model.
_OPTIONAL = (
    "max_restarts",
    "on_node_failure",
    "on_preemption",
    "on_time_limit",
    "exclude_failed_nodes",
    "no_progress_limit",
    "signal_before_timeout_seconds",
    "on_rank_failure",
)
# Durations: wire name -> model name (seconds as a float).
_DURATIONS = {
    "backoff": "backoff_seconds",
    "heartbeat_interval": "heartbeat_interval_seconds",
    "hang_timeout": "hang_timeout_seconds",
}
# JobSpec scalars and lists that keep their name in the model.
_PLAIN = (
    "name",
    "script",
    "nodes",
    "tasks_per_node",
    "gpus_per_node",
    "cpus_per_task",
    "memory_mb_per_node",
    "time_limit",
    "partition",
    "account",
    "qos",
    "working_directory",
    "stdout_path",
    "stderr_path",
    "checkpoint_uri",
    "checkpoint_tier",
    "request_id",
    "ntasks",
    "max_nodes",
    "gpus",
    "gpu_type",
    "memory_mb_per_cpu",
    "array",
    "dependency",
    "exclusive",
    "begin",
    "hold",
    "mail_type",
    "mail_user",
    "constraint",
    "reservation",
    "submit_directory",
    "script_name",
    "nice",
    "spare_nodes",
)
_LISTS = ("command", "sbatch_options")


def _seconds(d: Duration) -> float:
    return d.seconds + d.nanos / 1e9


def restart_policy_from_proto(p: jobs_pb2.RestartPolicy) -> RestartPolicy:
    values: dict[str, Any] = {name: getattr(p, name) if p.HasField(name) else None for name in _OPTIONAL}
    for wire, model in _DURATIONS.items():
        values[model] = _seconds(getattr(p, wire)) if p.HasField(wire) else None
    return RestartPolicy(
        retryable_exit_codes=tuple(p.retryable_exit_codes), fatal_exit_codes=tuple(p.fatal_exit_codes), **values
    )


def placement_from_proto(p: cluster_pb2.PlacementPreference, *, strict: bool = True) -> PlacementPreference:
    """The caller's placement preference; an unknown policy is INVALID_ARGUMENT, or with ``strict``
    False (a dry run's) plans as the default."""
    policy = _POLICIES.get(p.policy)
    if policy is None:
        if strict:
            raise InvalidArgument("spec.placement.policy", f"unknown policy {p.policy}")
        policy = PlacementPolicy.UNSPECIFIED
    return PlacementPreference(
        policy=policy,
        max_wait_seconds=p.max_wait_seconds,
        switch_count=p.switch_count,
        exclude_nodes=tuple(p.exclude_nodes),
        nodelist=tuple(p.nodelist),
        constraints=tuple(p.constraints),
    )


def spec_from_proto(p: jobs_pb2.JobSpec) -> JobSpec:
    """The submitted spec in the service's terms (an unknown placement policy is INVALID_ARGUMENT)."""
    values: dict[str, Any] = {name: getattr(p, name) for name in _PLAIN}
    values.update({name: tuple(getattr(p, name)) for name in _LISTS})
    return JobSpec(
        **values,
        environment=dict(p.environment),
        restart_policy=restart_policy_from_proto(p.restart_policy),
        placement=placement_from_proto(p.placement),
        export=p.export if p.HasField("export") else None,
    )


def restart_policy_to_proto(policy: RestartPolicy) -> jobs_pb2.RestartPolicy:
    out = jobs_pb2.RestartPolicy(
        retryable_exit_codes=policy.retryable_exit_codes, fatal_exit_codes=policy.fatal_exit_codes
    )
    for name in _OPTIONAL:
        value = getattr(policy, name)
        if value is not None:
            setattr(out, name, value)
    for wire, model in _DURATIONS.items():
        seconds = getattr(policy, model)
        if seconds is not None:
            getattr(out, wire).FromNanoseconds(round(seconds * 1e9))
    return out


def placement_to_proto(p: PlacementPreference) -> cluster_pb2.PlacementPreference:
    return cluster_pb2.PlacementPreference(
        policy=_WIRE_POLICIES[p.policy],
        max_wait_seconds=p.max_wait_seconds,
        switch_count=p.switch_count,
        exclude_nodes=p.exclude_nodes,
        nodelist=p.nodelist,
        constraints=p.constraints,
    )


def spec_to_proto(spec: JobSpec) -> jobs_pb2.JobSpec:
    out = jobs_pb2.JobSpec(
        **{name: getattr(spec, name) for name in (*_PLAIN, *_LISTS)},
        environment=spec.environment,
    )
    if spec.restart_policy != RestartPolicy():
        out.restart_policy.CopyFrom(restart_policy_to_proto(spec.restart_policy))
    if spec.placement != PlacementPreference():
        out.placement.CopyFrom(placement_to_proto(spec.placement))
    if spec.export is not None:
        out.export = spec.export
    return out
