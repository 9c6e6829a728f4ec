"""Plain data that crosses the Slurm seam.

Slurm's strings (``"RUNNING"``, ``"IDLE+DRAIN"``...) become these enums inside the parsers and
nowhere else, so the rest of the service never compares Slurm strings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class JobState(enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    UNKNOWN = "UNKNOWN"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL_JOB_STATES


_TERMINAL_JOB_STATES = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.PREEMPTED,
        JobState.OUT_OF_MEMORY,
        JobState.BOOT_FAIL,
        JobState.DEADLINE,
    }
)


class NodeState(enum.Enum):
    IDLE = "IDLE"
    MIXED = "MIXED"
    ALLOCATED = "ALLOCATED"
    DOWN = "DOWN"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    RESERVED = "RESERVED"
    UNKNOWN = "UNKNOWN"

    @property
    def usable(self) -> bool:
        """Whether the scheduler may place new work here."""
        return self in (NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED)


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: NodeState
    cpus_total: int = 0
    cpus_allocated: int = 0
    gpus_total: int = 0
    gpus_allocated: int = 0
    memory_mb_total: int = 0
    memory_mb_allocated: int = 0
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    reason: str = ""
    flags: tuple[str, ...] = ()  # raw extra state flags, e.g. ("DRAIN", "NOT_RESPONDING")
    address: str = ""  # where slurmd listens (NodeAddr); "" when the report does not say
    port: int = 0  # slurmd's port; 0 when the report does not say
    slurmd_started: float = 0.0  # when this node's slurmd last started (unix seconds; 0: unknown)

    @property
    def cpus_free(self) -> int:
        return max(self.cpus_total - self.cpus_allocated, 0)

    @property
    def gpus_free(self) -> int:
        return max(self.gpus_total - self.gpus_allocated, 0)


@dataclass(frozen=True)
class SlurmSwitch:
    """One line of ``scontrol show topology``: a switch with direct nodes or child switches."""

    name: str
    level: int
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlurmJob:
    """One job as the queue poll sees it."""

    job_id: str
    name: str
    user: str
    state: JobState
    reason: str = ""
    nodes: tuple[str, ...] = ()
    partition: str = ""
    exit_code: int = 0
    exit_signal: int = 0
    submit_time: float | None = None  # unix seconds
    start_time: float | None = None
    end_time: float | None = None
    restart_count: int = 0
    excluded_nodes: tuple[str, ...] = ()
    requeue: bool = False
    comment: str = ""  # carries the service's record tag, to re-adopt jobs after a crash
    batch_host: str = ""
    # Array elements: squeue lists each started task as its own job (its own job_id, the array's
    # id in array_job_id) and the tasks not started yet as one record on the array's id whose
    # array_pending is Slurm's task string ("4-9%2"). The array's last task takes the array's id.
    array_job_id: str = ""
    array_task_id: int | None = None
    array_pending: str = ""
    # Where the batch script's output goes, with Slurm's %-patterns (squeue shows them unexpanded),
    # and its working directory: what adopting a plain sbatch job records for `clusterctl logs`.
    stdout: str = ""
    stderr: str = ""
    working_directory: str = ""

    @property
    def in_array(self) -> bool:
        return bool(self.array_job_id)

    @property
    def display_id(self) -> str:
        """squeue's JOBID column: ``14``, ``14_3``, or ``14_[4-9%2]`` for the pending range."""
        if not self.array_job_id:
            return self.job_id
        if self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return f"{self.array_job_id}_[{self.array_pending}]"


@dataclass(frozen=True)
class ClusterFacts:
    """What job validation needs to know about the cluster, as the queue cache last saw it."""

    partitions: frozenset[str]
    nodes: frozenset[str]
    default_partition: str = ""
    slurm_release: tuple[int, int] | None = None  # whose sbatch directives are read as (None: the newest)


@dataclass(frozen=True)
class JobPoll:
    """One look at the queue: the whole of it, or the part that can have changed.

    A partial look (``whole`` False) lists every job that is not PENDING and every element of the
    jobs asked for by id, in any state; a PENDING job of someone else's is as the last whole look
    saw it. Anything a partial look should list and does not has left the queue or gone back to
    PENDING (QueueCache.merge).
    """

    jobs: tuple[SlurmJob, ...]
    whole: bool = True
    unchanged: bool = False  # Slurm said no job changed since the last look (slurmrestd's update_time)
    # The backend's last partial look again (same ``jobs``): nothing it covers changed since.
    standing: bool = False
