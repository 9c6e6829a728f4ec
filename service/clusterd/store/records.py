"""The job record: what the service knows about one submission, independent of gRPC and SQL."""

from __future__ import annotations

import enum
import os
import pwd
from dataclasses import dataclass, field, replace
from typing import Any

from clusterd.model.causes import Cause
from clusterd.model.events import EventType
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState, SlurmJob

RECORD_TAG_PREFIX = "clusterctl-record:"  # a Slurm comment starting so names the record that submitted it
# Who Slurm shows as the owner of jobs sbatch ran without the caller's rights (a non-root service).
_SERVICE_ACCOUNT: str | None = pwd.getpwuid(os.geteuid()).pw_name if os.geteuid() != 0 else None


class Phase(enum.Enum):
    """Where a submission stands before Slurm owns it."""

    SUBMITTING = "submitting"  # request_id reserved, sbatch not yet answered
    SUBMITTED = "submitted"  # Slurm accepted it: job_id is set
    FAILED = "failed"  # sbatch refused or never ran: nothing is in Slurm; a retry may submit again


@dataclass(frozen=True)
class RestartEntry:
    cause: Cause
    failed_nodes: tuple[str, ...]
    time: float
    checkpoint_step: int
    exit_code: int = 0
    detail: str = ""
    nodes_before: int = 0  # nodes of the run that ended (0: unknown)
    nodes_after: int = 0  # nodes of the next run, once it started (0: not yet)
    detected_by: str = ""  # "heartbeat+probe", "heartbeat", "rank-exit", "slurm", ...
    # Wall-clock times of the recovery's phases (failed, detected, requeued, running, first_step):
    # a phase is absent until it happened (or when it cannot be known, e.g. no heartbeats). Two more
    # keys describe the run that ended, for goodput: "committed", when the work after its newest
    # checkpoint began (its step first reported, plus that save's stall; later work is lost), and
    # "save_stall", the SECONDS its ranks said they stalled in save().
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class ArrayTask:
    """One task of an array job, as the poller last saw it (kept after Slurm forgets it)."""

    state: JobState = JobState.PENDING
    exit_code: int = 0
    exit_signal: int = 0
    nodes: tuple[str, ...] = ()
    restart_count: int = 0  # requeues the service made of this task alone
    slurm_restarts: int = 0  # Slurm's restart_cnt of the task's job (a requeue shows here)
    cancelled: bool = False  # the user cancelled this task: never requeued

    @property
    def restarts(self) -> int:
        """How often the task was started again, by the service or by Slurm (node failure)."""
        return max(self.restart_count, self.slurm_restarts)

    def to_json(self) -> dict[str, object]:
        return {
            "state": self.state.value,
            "exit_code": self.exit_code,
            "exit_signal": self.exit_signal,
            "nodes": list(self.nodes),
            "restart_count": self.restart_count,
            "slurm_restarts": self.slurm_restarts,
            "cancelled": self.cancelled,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArrayTask:
        return cls(
            JobState(data.get("state", "PENDING")),
            int(data.get("exit_code", 0)),
            int(data.get("exit_signal", 0)),
            tuple(data.get("nodes", ())),
            int(data.get("restart_count", 0)),
            int(data.get("slurm_restarts", 0)),
            bool(data.get("cancelled", False)),
        )


@dataclass
class JobRecord:
    record_id: int
    user: str
    request_id: str
    spec: JobSpec
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
    final_cause: Cause | None = None  # once terminal
    needs_release: bool = False  # requeued, waiting for exclusions + StartTime=now to be applied
    backoff_seconds: float = 0.0
    restarts: list[RestartEntry] = field(default_factory=list)
    tasks: int = 1  # what the record counts toward its user's job quota (array tasks)
    # Slurm gave this record's job id to a newer job (slurmctld lost its state): the record is
    # frozen and terminal, and nothing may act on the Slurm id on its behalf.
    superseded: bool = False
    array: str = ""  # --array as Slurm took it ("0-9%2"); empty for a plain job
    array_tasks: dict[int, ArrayTask] = field(default_factory=dict)  # task id -> its last seen state
    # SHA-256 of the job's heartbeat token (CLUSTERCTL_HEARTBEAT_TOKEN): only the job holds the token.
    heartbeat_token_sha256: str = ""
    # Goodput's timeline of run 0 (later runs have theirs in ``restarts``): when it started, and
    # its first training step as the ranks' beats said. None: not (yet) known.
    first_start: float | None = None
    first_step_time: float | None = None
    final_save_stall: float = 0.0  # seconds the last run stalled in save(), kept when the job ended

    def snapshot(self) -> JobRecord:
        """A copy that later updates of this record cannot change (events carry these)."""
        tasks = {i: replace(t) for i, t in self.array_tasks.items()}
        return replace(self, restarts=list(self.restarts), array_tasks=tasks)

    @property
    def comment_tag(self) -> str:
        """Written into the Slurm job's comment so a crashed submission can be found again."""
        return f"{RECORD_TAG_PREFIX}{self.record_id}"

    def tagged(self, comment: str) -> str:
        """The Slurm comment for this record's job: the user's own comment, then the tag."""
        return f"{comment} {self.comment_tag}" if comment else self.comment_tag

    def adopts(self, job: SlurmJob) -> bool:
        """Whether ``job`` is this record's crashed submission: its tag AND its owner's name.

        The tag alone is not enough: a user who writes another record's tag into their own job's
        comment must not have it adopted as someone else's. Slurm shows the caller as the owner
        when sbatch runs with the caller's rights, the service's account when it cannot.
        """
        return carries_tag(job.comment, self.comment_tag) and job.user in (self.user, _SERVICE_ACCOUNT)


def carries_tag(comment: str, tag: str) -> bool:
    """Whether a Slurm comment ends with a record's tag (after the user's own comment, if any)."""
    return comment == tag or comment.endswith(f" {tag}")


@dataclass(frozen=True)
class LiveRow:
    """A record the reconciler still follows, undecoded: ``updated`` changes with every save."""

    record_id: int
    phase: Phase
    job_id: str
    updated: float


@dataclass(frozen=True)
class EventRow:
    """One event a writer appends to the store's event log (every replica tails the log)."""

    record: JobRecord  # the record as of the event; only its row fields are kept (not the spec)
    type: EventType
    previous_state: str  # a JobState value, or ""
    message: str
    time: float


@dataclass(frozen=True)
class LoggedEvent:
    """An event read back from the log; ``seq`` is its position (a watcher's resume token)."""

    seq: int
    record: JobRecord  # compact: spec left empty, decoded like list() rows
    type: EventType
    previous_state: str
    message: str
    time: float


@dataclass(frozen=True)
class Lease:
    """A named lease row: who holds it, its fencing epoch, and how long it still runs."""

    name: str
    holder: str
    epoch: int
    expires_in: float  # seconds left by the DATABASE's clock (<= 0: expired)
