"""CheckpointManager: the public face of the data plane.

Blocking phase, then background commit, returning a handle: ``save()`` snapshots the
state into bounded staging memory and returns a :class:`SaveHandle`; one background thread per
in-flight slot checksums and uploads the shard, writes the manifest and runs the commit protocol.
A background failure is stored and raised by ``result()``, ``wait()`` or the next ``save()``.

Liveness: ``with CheckpointManager(...)`` enters the job's runtime (:mod:`clusterctl.runtime`),
which starts the rank's heartbeats when the job's environment configures them and reports an
exception leaving the block as the rank's exit status. The manager reports what it sees to the
running sender: ``save(step)`` as step progress, a committed step as ``committed_step``, and
``restore()`` returning as ``restored``. With no sender these reports cost a global lookup each.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from .. import heartbeat, slurm_env
from ..runtime import JobRuntime
from ..storage import ObjectNotFoundError, Storage, StorageError, open_storage
from ..storage.threads import nice_initializer
from . import commit, layout, stateful, torchcompat
from .assemble import RankLocalPolicy
from .config import CheckpointConfig
from .coordination import Coordinator, DueAgreement, TorchCoordinator
from .errors import CheckpointError, InvalidStateError, SaveError, SaveInProgressError
from .gc import GarbageReport, apply_retention, collect_garbage, latest_committed, list_committed
from .restore import VerifyReport, restore_state, verify_step
from .schedule import SaveSchedule
from .staging import StagingPool
from .tiering import TierAttachment
from .writer import Snapshot, take_snapshot, upload_snapshot

log = logging.getLogger(__name__)

_MAX_DUE_SKIP = 1000  # due() calls answered without a poll at most (a bound on a wrong pace's cost)


@dataclass(frozen=True)
class SaveResult:
    """Outcome of one save on this rank."""

    step: int
    committed: bool
    skipped: bool = False
    bytes: int = 0
    snapshot_seconds: float = 0.0
    total_seconds: float = 0.0


class SaveHandle:
    """Returned by :meth:`CheckpointManager.save` once the state is snapshotted."""

    def __init__(self, step: int, future: Future[SaveResult] | None, *, skipped: bool = False) -> None:
        self.step = step
        self.skipped = skipped
        self._future = future
        self.observed = False

    def done(self) -> bool:
        return self._future is None or self._future.done()

    def result(self, timeout: float | None = None) -> SaveResult:
        """Block until the step is committed (on every rank) and return the outcome.

        Raises:
            SaveError: the save failed; the message names rank, step, object and cause.
            TimeoutError: ``timeout`` passed first (the save keeps running).
        """
        if self._future is None:
            return SaveResult(self.step, committed=False, skipped=True)
        try:
            return self._future.result(timeout)
        except FutureTimeout:
            raise TimeoutError(f"save of step {self.step} still running after {timeout}s") from None
        except BaseException:
            self.observed = True
            raise

    def _wait_quietly(self) -> None:
        if self._future is not None:
            self._future.exception()


def _resolve_run_id(config: CheckpointConfig, world_size: int, coordinator: TorchCoordinator | None) -> str:
    explicit = config.run_id or os.environ.get("CLUSTERCTL_RUN_ID")
    if explicit:
        return layout.check_attempt(explicit)
    from_slurm = slurm_env.slurm_run_id()
    if from_slurm:
        return from_slurm
    if coordinator is not None:
        return f"dist-{coordinator.broadcast_token()}"
    elastic = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if elastic and elastic != "none":  # torchrun --standalone / --rdzv-id: one id per launch
        raw = f"torchrun-{elastic}-r{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        return re.sub(r"[^A-Za-z0-9._-]", "_", raw)[:80]
    if world_size == 1:
        return f"run-{uuid.uuid4().hex[:12]}"
    log.warning(
        "no run id for a %d-rank job (no Slurm, no torch.distributed, no CLUSTERCTL_RUN_ID): "
        "using 'run'; a retried save of a failed step may then mix attempts",
        world_size,
    )
    return "run"


class CheckpointManager:
    """Async sharded checkpoints of a nested state to S3 or a filesystem.

    Args:
        uri: ``s3://bucket/prefix``, ``file:///dir`` or a path. S3 settings come from the AWS_*
            variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION).
        rank, world_size: default to an initialized torch.distributed group, then torchrun's
            RANK/WORLD_SIZE, then SLURM_PROCID/SLURM_NTASKS, then 0/1; looked up again at every
            save and restore, so a manager created before ``init_process_group`` is right too.
        keep: committed steps to keep (older ones are deleted after each commit); 0 keeps all.
        interval: seconds between saves that :meth:`due` follows: None (default) leaves the
            schedule to the trainer (``due()`` is always True), a number is a fixed interval,
            ``"auto"`` follows the interval clusterd sends in heartbeat replies (see
            :mod:`.schedule`).
        config: every other knob (policy, staging memory, part size, deadlines).
        storage: a ready :class:`~clusterctl.storage.Storage` to use instead of opening ``uri``.
        tier: ``"memory"`` saves into the node's memory tier (:mod:`clusterctl.tier`): ``result()``
            returns once every shard has its replicas' verified copies in memory, the upload to
            ``uri`` follows in the tier's process (:meth:`wait_durable`), and restores read memory,
            then peers, then ``uri``. The tiers come from the ``CLUSTERCTL_TIER_*`` variables;
            without them the manager starts a tier process of its own (one copy, no peers).
            None: ``CLUSTERCTL_CHECKPOINT_TIER`` (set in a job submitted with ``--checkpoint-tier``).

    Raises:
        InvalidURIError (a ValueError): the URI is malformed.
        ValueError: rank/world_size out of range, or ``interval`` not None, "auto" or seconds > 0.
    """

    def __init__(
        self,
        uri: str,
        rank: int | None = None,
        world_size: int | None = None,
        keep: int = 3,
        *,
        config: CheckpointConfig | None = None,
        storage: Storage | None = None,
        tier: str | None = None,
        interval: float | str | None = None,
    ) -> None:
        self.config = config = config or CheckpointConfig()
        self._explicit = (rank, world_size)
        self.rank, self.world_size = self._resolve_world()
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        if tier is None:  # a job submitted with --checkpoint-tier memory
            tier = os.environ.get("CLUSTERCTL_CHECKPOINT_TIER") or None
        self._schedule = SaveSchedule(interval, first=config.auto_first_interval)
        if tier not in (None, "memory"):
            raise ValueError(f"tier must be None or 'memory', got {tier!r}")
        durable: Storage = storage or open_storage(uri, s3=config.s3_options(), posix=config.posix_options())
        self.durable_storage = durable
        self._tier: TierAttachment | None = None
        self.storage: Storage = durable
        self._read: Storage = durable
        if tier == "memory":
            self._tier = TierAttachment.open(uri, durable, config, self.world_size)
            if self._tier is not None:
                self.storage, self._read = self._tier.save_storage, self._tier.read_storage
        self.uri = uri
        self.keep = keep
        self._coordinator: TorchCoordinator | None = None
        self._due: DueAgreement | None = None  # due()'s own group (torch.distributed and an interval)
        self._due_skip = 0  # due() calls the ranks agreed to answer False without a poll
        self._lock = threading.Lock()
        self._inflight: list[tuple[SaveHandle, int, str]] = []
        self._finished: list[SaveHandle] = []
        self._attempts: Counter[int] = Counter()
        self._writer = f"{socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:6]})"
        self.run_id = ""
        self._sync_world(force=True)
        self._pool = StagingPool(
            config.staging_bytes,
            config.max_in_flight,
            pinned_allocator=torchcompat.pinned_empty if torchcompat.cuda_available() else None,
        )
        nice = nice_initializer(config.background_nice)
        self._bg = ThreadPoolExecutor(
            max_workers=config.max_in_flight, thread_name_prefix="ckpt-save", initializer=nice
        )
        self._io = ThreadPoolExecutor(
            max_workers=max(2, config.max_concurrency), thread_name_prefix="ckpt-io", initializer=nice
        )
        self._closed = False
        self._create_only_checked = False
        self.last_restored_step: int | None = None
        self._runtime = JobRuntime(report_return=False)
        self._last_committed: int | None = None

    def _resolve_world(self) -> tuple[int, int]:
        env_rank, env_world = slurm_env.rank_and_world_size()
        rank = env_rank if self._explicit[0] is None else self._explicit[0]
        world = env_world if self._explicit[1] is None else self._explicit[1]
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in [0, world_size={world})")
        return rank, world

    def _sync_world(self, *, force: bool = False) -> None:
        """Take up a rank, world size or process group that appeared since the last call.

        Called from the caller's thread at every save and restore: creating the coordinator's
        group is collective, and every rank reaches its first save (or restore) after
        ``init_process_group`` at the same point of the program.
        """
        rank, world = self._resolve_world()
        torch = torchcompat.loaded_torch()
        dist_up = (
            torch is not None and world > 1 and torch.distributed.is_available() and torch.distributed.is_initialized()
        )
        if (
            not force
            and (rank, world) == (self.rank, self.world_size)
            and (self._coordinator is not None or not dist_up)
        ):
            return
        if self._running():
            self.wait()  # saves in flight belong to the old world: finish them first
        self.rank, self.world_size = rank, world
        if self._coordinator is not None:
            self._coordinator.close()
        if self._due is not None:
            self._due.close()
        self._coordinator = TorchCoordinator.create(torch) if dist_up else None
        scheduled = dist_up and self._schedule.interval is not None
        self._due = DueAgreement.create(torch, timeout=self.config.due_timeout) if scheduled else None
        self._due_skip = 0
        self.run_id = _resolve_run_id(self.config, self.world_size, self._coordinator)

    # --- saving ---------------------------------------------------------------------------
    @property
    def interval(self) -> float | str | None:
        """The interval as given: None, seconds, or "auto"."""
        return self._schedule.interval

    def current_interval(self) -> float | None:
        """The seconds between saves in force now (the advised one for "auto"); None: no schedule."""
        return self._schedule.seconds()

    def due(self) -> bool:
        """Whether a save is due now, by ``interval``: ``if ckpt.due(): ckpt.save(step, state)``.

        With a torch.distributed group of more than one rank this is collective (an all_reduce on
        a gloo group of its own, apart from the background saves'): it is True on every rank when
        any rank's clock says so, so all ranks save the same step. Every rank must then call it at
        the same steps. The poll also agrees on the fewest calls any rank expects before it is due,
        and half of those are answered False with no poll: a handful of polls per interval, not
        one per step. Ranks without a shared group decide each on its own clock: keep a
        step-count schedule there.
        """
        self._check_open()
        if self._schedule.interval is None:
            return True
        here, calls_left = self._schedule.poll()
        self._sync_world()
        if self._due is None:
            return here
        if self._due_skip > 0:
            self._due_skip -= 1
            return False
        agreed = self._due.poll(here, calls_left)
        if agreed is None:
            return here
        due, fewest = agreed
        self._due_skip = 0 if due else min(_MAX_DUE_SKIP, fewest // 2)
        return due

    def save(self, step: int, state: Mapping[str, Any]) -> SaveHandle:
        """Snapshot ``state`` and upload it in the background; returns once the snapshot is taken.

        Top-level values with ``state_dict()``/``load_state_dict()`` (modules, optimizers,
        schedulers, your own objects) are saved as their state dicts, as
        ``torch.distributed.checkpoint`` takes them (see :mod:`.stateful`): DDP and FSDP2 state
        is stored once per replica group and restores at any world size.

        Raises:
            SaveError: an earlier background save failed (raised once, here or by wait()).
            SaveInProgressError: ``policy="raise"`` and a save is in flight.
            InvalidStateError: bad step, unsafe key or unsupported leaf.
            StagingLimitError: the snapshot does not fit the staging memory.
        """
        self._check_open()
        try:
            layout.check_step(step)
        except ValueError as exc:
            raise InvalidStateError(str(exc)) from None
        heartbeat.report_step(step)
        started, began = time.perf_counter(), self._schedule.now()
        handle = self._save(step, state)
        if not handle.skipped:  # a snapshot was taken: a skipped or refused save costs no interval
            self._schedule.restart(began)
            # The time training stood still for this save: the autopilot's measure of its cost.
            heartbeat.report_save_stall(time.perf_counter() - started)
        return handle

    def _save(self, step: int, state: Mapping[str, Any]) -> SaveHandle:
        self._raise_pending()
        self._sync_world()
        running = self._running()
        if len(running) >= self.config.max_in_flight:
            if self.config.policy == "skip":
                log.info("checkpoint step %d skipped: step %d still uploading", step, running[0][0].step)
                return SaveHandle(step, None, skipped=True)
            if self.config.policy == "raise":
                raise SaveInProgressError(
                    f"cannot save step {step}: the save of step {running[0][0].step} is "
                    "still in flight (policy='raise')"
                )
            while len(running) >= self.config.max_in_flight:
                running[0][0]._wait_quietly()
                running = self._running()
            self._raise_pending()
        self._attempts[step] += 1
        n = self._attempts[step]
        attempt = self.run_id if n == 1 else f"{self.run_id}-{n - 1}"
        if isinstance(state, Mapping) and stateful.has_stateful(state):
            state = stateful.to_state(state, self.world_size)
        snap = take_snapshot(
            state, step=step, attempt=attempt, rank=self.rank, world_size=self.world_size, pool=self._pool
        )
        future = self._bg.submit(self._run, snap, time.perf_counter() - snap.seconds)
        handle = SaveHandle(step, future)
        with self._lock:
            self._inflight.append((handle, step, attempt))
        return handle

    def _running(self) -> list[tuple[SaveHandle, int, str]]:
        with self._lock:
            for entry in self._inflight:
                if entry[0].done():
                    self._finished.append(entry[0])
            self._inflight = [x for x in self._inflight if not x[0].done()]
            return list(self._inflight)

    def _raise_pending(self) -> None:
        """Raise the oldest background failure nobody has seen through ``result()`` yet (once)."""
        self._running()
        with self._lock:
            finished, self._finished = self._finished, []
        for i, handle in enumerate(finished):
            exc = handle._future.exception() if handle._future is not None else None
            if exc is not None and not handle.observed:
                handle.observed = True
                with self._lock:  # keep later failures for the next call
                    self._finished = finished[i + 1 :] + self._finished
                raise exc

    def _wrap(self, exc: BaseException, step: int, key: str | None) -> SaveError:
        if isinstance(exc, SaveError):
            return exc
        where = getattr(exc, "key", None) or key
        target = f"{self.storage.uri}/{where}" if where else self.storage.uri
        err = SaveError(
            f"rank {self.rank}: saving step {step} failed at {target}: {exc}", rank=self.rank, step=step, key=where
        )
        err.__cause__ = exc
        return err

    def _run(self, snap: Snapshot, t0: float) -> SaveResult:
        step, attempt = snap.step, snap.attempt
        progress: dict[str, str | None] = {"key": layout.commit_key(step)}
        error: BaseException | None = None
        nbytes = snap.nbytes
        try:
            try:
                self.storage.stat(layout.commit_key(step))
                raise self._committed_already(step, attempt)
            except ObjectNotFoundError:
                pass
            upload_snapshot(snap, self.storage, executor=self._io, progress=progress, writer=self._writer)
        except Exception as exc:
            error = exc
        finally:
            snap.staging.release()
        coord: Coordinator | None = self._coordinator
        all_ok = coord.agree(error is None, timeout=self.config.commit_timeout) if coord is not None else True
        if error is not None:
            raise self._wrap(error, step, progress["key"])
        if not all_ok:
            raise SaveError(
                f"rank {self.rank}: step {step} not committed: another rank failed to write its shard",
                rank=self.rank,
                step=step,
            )
        poll = (self.config.poll_initial, self.config.poll_max)
        failure: Exception | None = None
        try:
            if self.rank == 0:
                progress["key"] = layout.attempt_prefix(step, attempt)
                commit.wait_for_manifests(
                    self.storage,
                    step=step,
                    attempt=attempt,
                    world_size=self.world_size,
                    timeout=self.config.commit_timeout,
                    poll=poll,
                )
                marker = commit.build_marker(
                    self.storage, step=step, attempt=attempt, world_size=self.world_size, executor=self._io
                )
                if not self._create_only_checked:
                    progress["key"] = commit.PROBE_PREFIX
                    commit.check_create_only(self.storage)
                    self._create_only_checked = True
                progress["key"] = layout.commit_key(step)
                commit.write_marker(self.storage, marker)
        except Exception as exc:
            failure = exc
        # With torch.distributed, rank 0 announces the outcome through the group: the other ranks
        # learn "committed" at once instead of polling storage for the marker with backoff.
        announced = coord.agree(failure is None, timeout=self.config.commit_timeout) if coord is not None else None
        if failure is not None:
            raise self._wrap(failure, step, progress["key"]) from failure
        try:
            if self.rank == 0:
                self._after_commit(step)
            elif announced is False:
                raise SaveError(
                    f"rank {self.rank}: step {step} not committed: rank 0 failed to commit it",
                    rank=self.rank,
                    step=step,
                    key=layout.commit_key(step),
                )
            else:
                commit.wait_for_commit(
                    self.storage,
                    rank=self.rank,
                    step=step,
                    attempt=attempt,
                    timeout=self.config.commit_timeout,
                    poll=poll,
                )
        except Exception as exc:
            raise self._wrap(exc, step, progress["key"]) from exc
        total = time.perf_counter() - t0
        heartbeat.report_committed(step)
        self._last_committed = step if self._last_committed is None else max(step, self._last_committed)
        return SaveResult(step, committed=True, bytes=nbytes, snapshot_seconds=snap.seconds, total_seconds=total)

    def _committed_already(self, step: int, attempt: str) -> SaveError:
        """The error for a save of a committed step; a commit by our own attempt means a second writer."""
        marker = commit.read_marker_or_none(self.storage, step)
        if marker is not None and marker.attempt == attempt:
            key = layout.writer_key(step, attempt, self.rank, self.world_size)
            first = commit.read_json_field(self.storage, key, "writer")
            return commit.duplicate_error(
                step,
                self.rank,
                self.world_size,
                first if isinstance(first, str) else "another process",
                self._writer,
                key,
            )
        return SaveError(
            f"rank {self.rank}: step {step} is already committed under {self.storage.uri}; "
            "committed steps are never overwritten",
            rank=self.rank,
            step=step,
            key=layout.commit_key(step),
        )

    def _after_commit(self, step: int) -> None:
        """Retention and GC on rank 0; failures here are logged, the step is already committed."""
        try:
            protect = {s for _, s, _ in self._running()} | {step}
            apply_retention(self.storage, self.keep, protect=protect)
            if self.config.gc_on_commit:
                collect_garbage(self.storage, grace=self.config.gc_grace, in_flight=self._in_flight_attempts())
        except (StorageError, CheckpointError) as exc:
            log.warning("checkpoint retention/GC after step %d failed: %s", step, exc)

    def _in_flight_attempts(self) -> set[tuple[int, str]]:
        with self._lock:
            return {(s, a) for _, s, a in self._inflight}

    def wait(self) -> None:
        """Block until every in-flight save finished; raise the first unobserved failure."""
        for handle, _, _ in self._running():
            handle._wait_quietly()
        self._raise_pending()

    # --- discovery and restore -----------------------------------------------------------
    def steps(self) -> list[int]:
        """Committed steps, ascending (one LIST)."""
        return list_committed(self._read)

    def latest_step(self) -> int | None:
        """Newest committed step, or None (one LIST)."""
        return latest_committed(self._read)

    def restore(
        self,
        step: int | None = None,
        *,
        template: Any = None,
        rank: int | None = None,
        rank_local: RankLocalPolicy | None = None,
        into: Mapping[str, Any] | None = None,
        strict: bool = True,
    ) -> Any:
        """The state of ``step`` (default: the newest valid step) for this rank, or None if none.

        ``into`` maps top-level keys to objects with ``load_state_dict()`` (modules, optimizers,
        schedulers, your own) or to dicts: their state is loaded in place, like
        ``torch.distributed.checkpoint.load`` followed by ``set_state_dict``, and the restored step
        is returned (None when nothing is committed). Modules and optimizers are restored through
        torch's distributed state-dict API at the layout they have now (FSDP2 shards, any world
        size); keys are strict as in ``load_state_dict`` (a key of ``into`` or of a module missing
        from the checkpoint raises :class:`RestoreError` naming it) unless ``strict=False``. Values
        saved per rank come back from this rank's save at the same world size, else from rank 0's
        (``rank_local`` defaults to ``"rank0"`` here).

        ``template`` gives the layout wanted now: at each path where it holds a
        :class:`~.parallel.Sharded` (or a DTensor), that leaf comes back as this rank's slice of
        the global array, read from whichever saved ranks hold it (only the byte ranges needed);
        when the template's local tensor has the saved dtype and the wanted shape (CPU, contiguous),
        it is filled in place and returned, as ``torch.distributed.checkpoint.load`` does.
        Without a template a sharded leaf comes back as this rank's own piece (same world size) or
        its even dim-0 share (``torch.chunk``; the whole array on one process). Replicated leaves
        come back whole at any world size. Rank-local leaves (neither) need the same world size,
        unless ``rank_local`` says what to do: ``"rank0"`` takes rank 0's value, ``"drop"`` leaves
        them out (``None`` inside lists and tuples).

        A committed step whose objects are missing, truncated or corrupt is skipped with a
        :class:`CheckpointFallbackWarning` (and a logged warning) when ``step`` is None, and
        raises :class:`CorruptCheckpointError` when ``step`` was asked for. ``rank`` reads another
        rank's shard as saved (no resharding). Arrays come back as numpy arrays, tensors as CPU torch
        tensors when torch is installed. Nothing is unpickled.

        Raises:
            WorldSizeMismatchError, RestoreError, CorruptCheckpointError, StorageError.
            TypeError: ``into`` is not a dict of stateful objects or dicts, or comes with ``template``.
        """
        self._check_open()
        if step is not None:
            layout.check_step(step)
        self._sync_world()
        if into is not None:
            if template is not None:
                raise TypeError("restore() takes into= or template=, not both (into= builds its own template)")
            stateful.check_into(into)
            template = stateful.template_for(into)
        explicit = rank is not None
        if rank_local is None:
            rank_local = "rank0" if into is not None else "error"
        result = restore_state(
            self._read,
            step=step,
            rank=self.rank if rank is None else rank,
            world_size=None if explicit else self.world_size,
            executor=self._io,
            coordinator=None if explicit else self._coordinator,
            agree_timeout=self.config.commit_timeout,
            template=template,
            rank_local=rank_local,
        )
        self._schedule.restart()
        if result is None:
            heartbeat.report_restored()
            return None
        self.last_restored_step = result[0]
        if into is not None:
            stateful.load_into(into, result[1], step=result[0], strict=strict)
        heartbeat.report_committed(result[0])
        heartbeat.report_restored()
        return result[0] if into is not None else result[1]

    def verify(self, step: int) -> VerifyReport:
        """Verify every rank's shard of a committed step (reads everything; bounded memory)."""
        return verify_step(self._read, step, executor=self._io)

    def durable_steps(self) -> list[int]:
        """Committed steps on the URI itself (with ``tier="memory"``, those whose upload finished)."""
        return list_committed(self.durable_storage)

    def wait_durable(self, step: int | None = None, timeout: float | None = None) -> int | None:
        """Block until ``step`` (default: the newest step this manager committed) is committed on the URI.

        Without a tier every commit is durable at once. Returns the step (None when nothing was saved).

        Raises:
            TimeoutError: ``timeout`` passed first (the upload keeps running in the tier).
        """
        self.wait()
        step = self._last_committed if step is None else layout.check_step(step)
        if step is None or self._tier is None:
            return step
        poller = commit.Poller(float("inf") if timeout is None else timeout, 0.05, 0.25)
        while True:
            try:
                self.durable_storage.stat(layout.commit_key(step))
                return step
            except ObjectNotFoundError:
                pass
            except StorageError as exc:
                log.info("checkpoint: durability of step %d not known yet: %s", step, exc)
            if not poller.wait():
                raise TimeoutError(f"step {step} not on {self.durable_storage.uri} after {timeout}s")

    def gc(self, *, grace: float | None = None, dry_run: bool = False) -> GarbageReport:
        """Collect uncommitted objects and multipart uploads older than ``grace`` (default config)."""
        return collect_garbage(
            self.storage,
            grace=self.config.gc_grace if grace is None else grace,
            in_flight=self._in_flight_attempts(),
            dry_run=dry_run,
        )

    # --- lifecycle ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError("CheckpointManager is closed")

    def close(self) -> None:
        """Wait for in-flight saves, release threads, staging memory and connections.

        Raises the first unobserved background failure (after cleaning up).
        """
        if self._closed:
            return
        self._closed = True
        try:
            for handle, _, _ in self._running():
                handle._wait_quietly()
        finally:
            self._bg.shutdown(wait=True)
            self._io.shutdown(wait=True)
            self._pool.clear()
            if self._tier is not None:
                self._tier.close(self._last_committed, self.config.commit_timeout)
            else:
                self.storage.close()
            if self._coordinator is not None:
                self._coordinator.close()
            if self._due is not None:
                self._due.close()
        self._raise_pending()

    def __enter__(self) -> CheckpointManager:
        """Enter the job's runtime (heartbeats); an exception leaving the block is the rank's exit status."""
        self._runtime.enter()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        try:
            self.close()
        except BaseException as exc:  # a failed background save leaves the block too
            error = exc
            raise
        finally:
            self._runtime.leave(error)
