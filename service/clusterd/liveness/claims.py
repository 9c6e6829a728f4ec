"""What a rank sends in a heartbeat and what clusterd answers, as the liveness service sees them.

The API edge converts the wire messages to and from these; nothing here is trusted until
:class:`clusterd.liveness.heartbeats.HeartbeatService` has checked it against the record and Slurm.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BeatClaim:
    """One rank's heartbeat as received: every field is the job's word."""

    record_id: int
    token: str
    job_id: str = ""
    restart_count: int = 0
    relaunch: int = 0  # the in-place relaunch of the run (--spare-nodes) the rank belongs to
    rank: int = 0
    world_size: int = 0
    node: str = ""
    pid: int = 0
    step: int = -1
    committed_step: int = -1
    restored: bool = False
    exiting: bool = False
    exit_code: int = 0
    stopping_step: int | None = None  # the step the rank holds at for a stop; None: not stopping
    step_seconds: float = 0.0  # the rank's recent seconds per step (0: not known)
    stack: str = ""  # the rank's stacks, sent when a reply asked for them
    save_stall: float = 0.0  # seconds this rank's saves blocked in this run
    saves: int = 0


@dataclass(frozen=True)
class BeatReply:
    """What the rank is told: when to beat next, whether its run is being restarted, and the stop."""

    interval: float
    stop: bool = False  # the run is being restarted: stop working, exit soon
    stopping: bool = False  # a rank of the run holds for a stop: every rank holds and says where
    stop_step: int | None = None  # every rank held: the step each trains on to, saves, and exits at
    want_stack: bool = False  # the run stopped advancing: send the rank's stacks in the next beat
    checkpoint_interval: float | None = None  # the autopilot's advice (seconds); None: none yet
