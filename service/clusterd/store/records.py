"""The job record: what the service knows about one submission, independent of gRPC and SQL."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from clusterctl.v1 import jobs_pb2
from clusterd.slurm.types import JobState


class Phase(enum.Enum):
    """Where a submission stands before Slurm owns it."""

    SUBMITTING = "submitting"  # request_id reserved, sbatch not yet answered
    SUBMITTED = "submitted"  # Slurm accepted it: job_id is set
    FAILED = "failed"  # sbatch refused or never ran: nothing is in Slurm; a retry may submit again


@dataclass(frozen=True)
class RestartEntry:
    cause: str  # TerminationCause name without prefix, e.g. "NODE_FAILURE"
    failed_nodes: tuple[str, ...]
    time: float
    checkpoint_step: int
    exit_code: int = 0
    detail: str = ""


@dataclass
class JobRecord:
    record_id: int
    user: str
    request_id: str
    spec: jobs_pb2.JobSpec
    phase: Phase
    created: float
    job_id: str = ""
    name: str = ""
    state: JobState = JobState.PENDING
    reason: str = ""
    nodes: tuple[str, ...] = ()
    partition: str = ""
    exit_code: int = 0
    exit_signal: int = 0
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    restart_count: int = 0
    terminal: bool = False
    final_reason: str = ""
    checkpoint_step: int = -1
    excluded_nodes: tuple[str, ...] = ()
    placement_explanation: str = ""
    error: str = ""  # why the submission failed (phase FAILED)
    user_cancelled: bool = False  # a user's cancel is final: never requeued
    acked_restarts: int = 0  # the Slurm restart count the supervisor has accounted for
    final_cause: str = ""  # TerminationCause name once terminal
    needs_release: bool = False  # requeued, waiting for exclusions + StartTime=now to be applied
    backoff_seconds: float = 0.0
    restarts: list[RestartEntry] = field(default_factory=list)

    def snapshot(self) -> JobRecord:
        """A copy that later updates of this record cannot change (events carry these)."""
        return replace(self, restarts=list(self.restarts))

    @property
    def comment_tag(self) -> str:
        """Written into the Slurm job's comment so a crashed submission can be found again."""
        return f"clusterctl-record:{self.record_id}"
