"""One dataclass with every knob of the checkpoint manager (sizes, bounds, deadlines, policy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..storage import PosixOptions, S3Options

InFlightPolicy = Literal["wait", "skip", "raise"]


@dataclass(frozen=True)
class CheckpointConfig:
    """Settings of a :class:`~clusterctl.checkpoint.CheckpointManager`.

    Attributes:
        policy: what ``save()`` does while ``max_in_flight`` saves are still uploading:
            ``"wait"`` blocks until one finishes (default), ``"skip"`` returns a skipped handle,
            ``"raise"`` raises SaveInProgressError. In multi-rank jobs keep ``"wait"``: ``"skip"``
            is decided per rank, and a step skipped by one rank never commits.
        max_in_flight: saves allowed to upload at once (each holds one staging buffer).
        staging_bytes: cap on snapshot memory; None = ``max_in_flight`` buffers of the largest
            snapshot seen. A snapshot larger than the cap raises StagingLimitError.
        part_size: multipart part size / parallel I/O unit, also the checksum chunk size.
        max_concurrency: parallel part uploads or downloads per rank.
        commit_timeout: seconds rank 0 waits for all shard manifests (and other ranks wait for
            the commit marker) before the save fails.
        poll_initial, poll_max: backoff bounds while polling storage for manifests / the marker.
        background_nice: nice increment of the background save/upload threads, so a save competes
            less with the training loop for CPU (0 = same priority).
        gc_grace: uncommitted objects and multipart uploads younger than this are never collected.
        gc_on_commit: rank 0 collects garbage older than ``gc_grace`` after each commit.
        auto_first_interval: with ``interval="auto"``, the seconds between saves until clusterd
            advises an interval (and always without heartbeats).
        due_timeout: seconds ``due()`` waits for the other ranks' poll (torch.distributed) before it
            answers by this rank's clock alone.
        run_id: names this job incarnation's save attempts; None = from Slurm / torch.distributed.
        connect_timeout, read_timeout, max_attempts: per-request deadlines and tries (S3).
        s3, posix: full backend options; when None they are built from the fields above.
    """

    policy: InFlightPolicy = "wait"
    max_in_flight: int = 1
    staging_bytes: int | None = None
    part_size: int = 64 << 20
    max_concurrency: int = 8
    commit_timeout: float = 600.0
    poll_initial: float = 0.05
    poll_max: float = 2.0
    background_nice: int = 10
    gc_grace: float = 6 * 3600.0
    gc_on_commit: bool = True
    auto_first_interval: float = 300.0
    due_timeout: float = 120.0
    run_id: str | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    max_attempts: int = 5
    s3: S3Options | None = None
    posix: PosixOptions | None = None

    def __post_init__(self) -> None:
        if self.policy not in ("wait", "skip", "raise"):
            raise ValueError(f"policy must be 'wait', 'skip' or 'raise', got {self.policy!r}")
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        if self.part_size < 1 << 20:
            raise ValueError("part_size must be at least 1 MiB")
        if not 0 < self.due_timeout < float("inf"):
            raise ValueError(f"due_timeout must be a positive number of seconds, got {self.due_timeout!r}")

    def s3_options(self) -> S3Options:
        return self.s3 or S3Options(
            part_size=max(self.part_size, 5 << 20),
            max_concurrency=self.max_concurrency,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            max_attempts=self.max_attempts,
            thread_nice=self.background_nice,
        )

    def posix_options(self) -> PosixOptions:
        return self.posix or PosixOptions(
            part_size=self.part_size, max_concurrency=min(self.max_concurrency, 8), thread_nice=self.background_nice
        )
