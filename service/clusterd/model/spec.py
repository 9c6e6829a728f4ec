"""A job as the caller asked for it: the spec, its restart policy and its placement preference.

Frozen values: the store keeps one per record and compares a retried submission with it. Every
field the API carries is here, so what ``status`` shows and what a retry is compared with are the
caller's whole request. Optional policy fields are None where the caller left them to the
service's defaults.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from clusterd.topology.demand import Policy


class PlacementPolicy(enum.StrEnum):
    """How the planner places the job's nodes; UNSPECIFIED plans as PACK."""

    UNSPECIFIED = "unspecified"
    PACK = "pack"
    ANY = "any"
    EXACT = "exact"

    @property
    def planned(self) -> Policy:
        """The policy the planner applies."""
        return _PLANNED[self]


_PLANNED: dict[PlacementPolicy, Policy] = {
    PlacementPolicy.UNSPECIFIED: "pack",
    PlacementPolicy.PACK: "pack",
    PlacementPolicy.ANY: "any",
    PlacementPolicy.EXACT: "exact",
}


def _freeze(obj: object, names: Sequence[str]) -> None:
    """Sequences given as lists become tuples, so equal specs compare equal however they were built."""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, tuple):
            object.__setattr__(obj, name, tuple(value))


# Checkpoint tiers a job may ask for ("": none, checkpoints go straight to their URI).
CHECKPOINT_TIERS = ("", "memory")


@dataclass(frozen=True)
class RestartPolicy:
    """When the supervisor brings a job back; None: the service's configured default."""

    max_restarts: int | None = None
    on_node_failure: bool | None = None
    on_preemption: bool | None = None
    on_time_limit: bool | None = None
    retryable_exit_codes: tuple[int, ...] = ()
    fatal_exit_codes: tuple[int, ...] = ()
    backoff_seconds: float | None = None
    exclude_failed_nodes: bool | None = None
    no_progress_limit: int | None = None
    signal_before_timeout_seconds: int | None = None  # SIGUSR1 to the batch shell this long before the limit
    heartbeat_interval_seconds: float | None = None  # None or 0: the liveness defaults
    hang_timeout_seconds: float | None = None
    on_rank_failure: bool | None = None

    def __post_init__(self) -> None:
        _freeze(self, ("retryable_exit_codes", "fatal_exit_codes"))


@dataclass(frozen=True)
class PlacementPreference:
    """Where the job's nodes should be, beyond their number (0 and empty: not asked)."""

    policy: PlacementPolicy = PlacementPolicy.UNSPECIFIED
    max_wait_seconds: int = 0  # pack: how long Slurm may wait for a single switch
    switch_count: int = 0  # exact: number of leaf switches
    exclude_nodes: tuple[str, ...] = ()
    nodelist: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()  # Slurm features, ANDed

    def __post_init__(self) -> None:
        _freeze(self, ("exclude_nodes", "nodelist", "constraints"))


@dataclass(frozen=True)
class JobSpec:
    """One submission's request; the field meanings are sbatch's (see the API's JobSpec)."""

    name: str = ""
    script: str = ""
    command: tuple[str, ...] = ()
    nodes: int = 0
    tasks_per_node: int = 0
    gpus_per_node: int = 0
    cpus_per_task: int = 0
    memory_mb_per_node: int = 0
    time_limit: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""
    environment: Mapping[str, str] = field(default_factory=dict)  # read-only once made
    working_directory: str = ""
    stdout_path: str = ""
    stderr_path: str = ""
    checkpoint_uri: str = ""
    checkpoint_tier: str = ""  # "" or "memory" (CHECKPOINT_TIERS)
    restart_policy: RestartPolicy = RestartPolicy()
    placement: PlacementPreference = PlacementPreference()
    request_id: str = ""
    ntasks: int = 0
    max_nodes: int = 0
    gpus: int = 0
    gpu_type: str = ""
    memory_mb_per_cpu: int = 0
    array: str = ""
    dependency: str = ""
    exclusive: bool = False
    begin: str = ""
    hold: bool = False
    mail_type: str = ""
    mail_user: str = ""
    constraint: str = ""
    reservation: str = ""
    export: str | None = None  # None: sbatch's default (ALL, or the script's --export)
    submit_directory: str = ""
    script_name: str = ""
    nice: int = 0
    sbatch_options: tuple[str, ...] = ()
    spare_nodes: int = 0  # held beside ``nodes`` for a restart in place (the ranks run on ``nodes``)

    def __post_init__(self) -> None:
        _freeze(self, ("command", "sbatch_options"))
        if not isinstance(self.environment, MappingProxyType):
            object.__setattr__(self, "environment", MappingProxyType(dict(self.environment)))
