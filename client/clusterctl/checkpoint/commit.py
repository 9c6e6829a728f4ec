"""The commit protocol: when a step becomes visible (the commit-file variant of Orbax's atomicity).

A step is committed by exactly one small marker, ``commits/<step>.json``, written by rank 0 with
a create-only put *after* every rank's shard manifest of that attempt is readable. Rank 0 learns
that the manifests exist by listing the attempt's prefix with backoff, bounded by
``commit_timeout`` (and, when torch.distributed is up, every rank has already agreed on success).
The marker records each manifest's size and xxh3 digest, so a reader can tell a committed
manifest from one that was replaced later. Other ranks learn the outcome from rank 0 through the
torch.distributed group when there is one, else wait (bounded) for the marker, so that
``result()`` means "committed" on every rank.

Two processes that believe they are the same rank (``srun torchrun`` without a process group:
both inherit one ``SLURM_PROCID``) would overwrite each other's shard. Each writer therefore first
claims its rank of the attempt with a create-only ``.writer.json``; a second writer finds the
claim, leaves a ``.conflict.json`` naming both, and fails before writing any byte of the shard.
Rank 0 refuses to commit an attempt whose listing shows a conflict, so the step is not committed
and the error names both writers.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor

from ..storage import ObjectExistsError, ObjectNotFoundError, Storage
from ..storage.conditional import create_only_refusal
from . import checksum, layout
from .errors import CommitTimeoutError, DuplicateWriterError, SaveError
from .manifest import MAX_MANIFEST_BYTES, MAX_MARKER_BYTES, CommitMarker, ShardEntry, load_manifest, load_marker


class Poller:
    """Exponential backoff between ``initial`` and ``maximum`` until ``timeout`` seconds pass."""

    def __init__(
        self, timeout: float, initial: float, maximum: float, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.deadline = time.monotonic() + timeout
        self.delay = initial
        self.maximum = maximum
        self._sleep = sleep

    def wait(self) -> bool:
        """Sleep before the next poll; False when the deadline has passed."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return False
        self._sleep(min(self.delay, remaining))
        self.delay = min(self.delay * 2, self.maximum)
        return True


MAX_CLAIM_BYTES = 64 << 10


def duplicate_error(step: int, rank: int, world_size: int, first: str, second: str, key: str) -> DuplicateWriterError:
    return DuplicateWriterError(
        f"step {step} not committed: rank {rank} of {world_size} was saved by two processes, {first} and "
        f"{second}; every process needs its own rank (under srun torchrun, call "
        "torch.distributed.init_process_group() before saving, or keep torchrun's RANK/WORLD_SIZE in the "
        "environment; SLURM_PROCID is shared by the processes of one Slurm task)",
        rank=rank,
        step=step,
        key=key,
        writers=(first, second),
    )


def read_json_field(storage: Storage, key: str, name: str) -> object:
    try:
        return json.loads(storage.get(key, max_size=MAX_CLAIM_BYTES)).get(name)
    except (ObjectNotFoundError, ValueError, AttributeError):
        return None


def claim_rank(storage: Storage, *, step: int, attempt: str, rank: int, world_size: int, writer: str) -> None:
    """Claim ``rank`` of this attempt for ``writer`` (create-only), before its shard is written.

    Raises:
        DuplicateWriterError: another process claimed it first (a conflict object is left for rank 0).
    """
    key = layout.writer_key(step, attempt, rank, world_size)
    try:
        storage.put(key, json.dumps({"writer": writer}).encode(), if_absent=True)
        return
    except ObjectExistsError:
        first = read_json_field(storage, key, "writer")
    if first == writer:  # our own put, retried after its reply was lost
        return
    first_name = str(first) if isinstance(first, str) else "another process"
    doc = json.dumps({"rank": rank, "writers": [first_name, writer]}).encode()
    with contextlib.suppress(ObjectExistsError):  # a third writer: the first conflict is enough
        storage.put(layout.conflict_key(step, attempt, rank, world_size), doc, if_absent=True)
    raise duplicate_error(step, rank, world_size, first_name, writer, key)


def _check_conflicts(storage: Storage, listed: set[str], *, step: int, world_size: int) -> None:
    for key in sorted(k for k in listed if layout.is_conflict_key(k)):
        rank = read_json_field(storage, key, "rank")
        writers = read_json_field(storage, key, "writers")
        pair = [str(w) for w in writers][:2] if isinstance(writers, list) else []
        pair += ["another process"] * (2 - len(pair))
        raise duplicate_error(step, rank if isinstance(rank, int) else -1, world_size, pair[0], pair[1], key)


def wait_for_manifests(
    storage: Storage, *, step: int, attempt: str, world_size: int, timeout: float, poll: tuple[float, float]
) -> None:
    """Rank 0: block until every rank's manifest of this attempt is listed.

    Raises:
        CommitTimeoutError: some manifests did not appear within ``timeout`` (names the ranks).
        DuplicateWriterError: two processes wrote one rank (names both).
    """
    expected = {layout.manifest_key(step, attempt, r, world_size): r for r in range(world_size)}
    poller = Poller(timeout, *poll)
    prefix = layout.attempt_prefix(step, attempt)
    while True:
        listed = {o.key for o in storage.list_objects(prefix)}
        _check_conflicts(storage, listed, step=step, world_size=world_size)
        missing = sorted(r for k, r in expected.items() if k not in listed)
        if not missing:
            return
        if not poller.wait():
            shown = ", ".join(map(str, missing[:20])) + (", ..." if len(missing) > 20 else "")
            raise CommitTimeoutError(
                f"rank 0: step {step} not committed: no shard manifest from rank(s) [{shown}] after {timeout:.0f}s "
                f"(a rank died or is still uploading); expected under {storage.uri}/{prefix}",
                rank=0,
                step=step,
                key=prefix,
            )


def build_marker(
    storage: Storage, *, step: int, attempt: str, world_size: int, executor: Executor | None
) -> CommitMarker:
    """Read and check every manifest of the attempt and describe them in a commit marker."""

    def entry(rank: int) -> ShardEntry:
        key = layout.manifest_key(step, attempt, rank, world_size)
        data = storage.get(key, max_size=MAX_MANIFEST_BYTES)
        try:
            m = load_manifest(data)
        except ValueError as exc:
            raise SaveError(
                f"rank 0: manifest {key} of rank {rank} is invalid: {exc}", rank=0, step=step, key=key
            ) from None
        if (m.step, m.rank, m.world_size, m.attempt) != (step, rank, world_size, attempt):
            raise SaveError(
                f"rank 0: manifest {key} describes step {m.step} rank {m.rank}/{m.world_size} "
                f"attempt {m.attempt}, not what its name says",
                rank=0,
                step=step,
                key=key,
            )
        return ShardEntry(rank, key, len(data), checksum.digest(data), m.shard_size)

    ranks = range(world_size)
    entries = list(executor.map(entry, ranks)) if executor is not None and world_size > 1 else [entry(r) for r in ranks]
    return CommitMarker(step, world_size, attempt, time.time(), entries)


PROBE_PREFIX = "probe/"


def check_create_only(storage: Storage) -> None:
    """Make sure the store refuses a second create-only put of one key (S3: ``If-None-Match: *``).

    Commit markers rely on it: a server that ignores the header would let two attempts both
    "commit" a step, the second silently replacing the first. Run once per manager, before its
    first commit; the probe object lives under ``probe/`` and is deleted afterwards.

    Raises:
        SaveError: the server accepted the second create-only put.
    """
    key = f"{PROBE_PREFIX}create-only-{uuid.uuid4().hex}"
    refusal = create_only_refusal(storage, key)
    if refusal is None:
        return
    raise SaveError(
        f"rank 0: {storage.uri}: {refusal}: commit markers could overwrite each other, so no step "
        "is committed there; use a server that enforces conditional PUTs (AWS S3, MinIO, SeaweedFS, Ceph RGW)",
        rank=0,
        step=-1,
        key=key,
    )


def write_marker(storage: Storage, marker: CommitMarker) -> None:
    """Create the marker (create-only). An existing marker of the same attempt counts as success.

    Raises:
        SaveError: the step is already committed by another attempt.
    """
    key = layout.commit_key(marker.step)
    try:
        storage.put(key, marker.to_json(), if_absent=True)
    except ObjectExistsError:
        existing = read_marker_or_none(storage, marker.step)
        if existing is None or existing.attempt != marker.attempt:
            other = existing.attempt if existing else "unknown"
            raise SaveError(
                f"rank 0: step {marker.step} is already committed (attempt {other}); "
                "committed steps are never overwritten",
                rank=0,
                step=marker.step,
                key=key,
            ) from None


def read_marker_or_none(storage: Storage, step: int) -> CommitMarker | None:
    try:
        return load_marker(storage.get(layout.commit_key(step), max_size=MAX_MARKER_BYTES))
    except ObjectNotFoundError:
        return None
    except ValueError:
        return None


def wait_for_commit(
    storage: Storage, *, rank: int, step: int, attempt: str, timeout: float, poll: tuple[float, float]
) -> None:
    """Ranks other than 0: block until rank 0 committed this attempt of the step.

    Raises:
        CommitTimeoutError: no marker within ``timeout``.
        SaveError: the step was committed by a different attempt.
    """
    key = layout.commit_key(step)
    poller = Poller(timeout, *poll)
    while True:
        marker = read_marker_or_none(storage, step)
        if marker is not None:
            if marker.attempt != attempt:
                raise SaveError(
                    f"rank {rank}: step {step} was committed by attempt {marker.attempt}, not this one ({attempt})",
                    rank=rank,
                    step=step,
                    key=key,
                )
            return
        if not poller.wait():
            raise CommitTimeoutError(
                f"rank {rank}: step {step} was not committed by rank 0 within {timeout:.0f}s (no {storage.uri}/{key})",
                rank=rank,
                step=step,
                key=key,
            )
