"""Discovery, verification and restore of committed steps.

Discovery is one LIST of ``commits/``. Restoring a step reads its marker, checks the world size,
checks with one LIST that every rank's manifest and shard exist with the sizes the marker and
manifests promise (so all ranks reject a step with a missing or truncated shard alike), then
reads this rank's manifest (size and digest must match the marker) and shard (size, then every
chunk's xxh3 against the manifest), and only then parses the bounds-checked safetensors header
and rebuilds the tree. Data problems raise :class:`CorruptCheckpointError`, which makes
``restore()`` fall back to the previous step; storage outages propagate (falling back on a
network blip would silently lose progress).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..storage import ObjectNotFoundError, Storage, StorageError
from . import checksum, layout, torchcompat
from .coordination import Coordinator
from .errors import CheckpointFallbackWarning, CorruptCheckpointError, RestoreError, WorldSizeMismatchError
from .gc import list_committed
from .manifest import MAX_MANIFEST_BYTES, MAX_MARKER_BYTES, CommitMarker, ShardManifest, load_manifest, load_marker
from .shard import parse_shard, tensor_bytes
from .tree import tree_has_torch, unflatten

log = logging.getLogger(__name__)


def read_marker(storage: Storage, step: int) -> CommitMarker:
    key = layout.commit_key(step)
    try:
        marker = load_marker(storage.get(key, max_size=MAX_MARKER_BYTES))
    except ObjectNotFoundError:
        raise CorruptCheckpointError(f"step {step}: commit marker {key} disappeared", step=step, key=key) from None
    except (ValueError, StorageError) as exc:
        if isinstance(exc, StorageError) and type(exc) is not StorageError:
            raise  # outages, access denied: not a property of the data
        raise CorruptCheckpointError(f"step {step}: commit marker {key} is invalid: {exc}", step=step,
                                     key=key) from None
    try:
        layout.check_attempt(marker.attempt)
    except ValueError as exc:
        raise CorruptCheckpointError(f"step {step}: marker {key}: {exc}", step=step, key=key) from None
    if marker.step != step:
        raise CorruptCheckpointError(f"step {step}: marker {key} says step {marker.step}", step=step, key=key)
    return marker


def check_structure(storage: Storage, marker: CommitMarker) -> None:
    """One LIST: every manifest and shard of the step exists with the promised size."""
    step, attempt, world = marker.step, marker.attempt, marker.world_size
    sizes = {o.key: o.size for o in storage.list_objects(layout.attempt_prefix(step, attempt))}
    for e in marker.shards:
        mkey = layout.manifest_key(step, attempt, e.rank, world)
        skey = layout.shard_key(step, attempt, e.rank, world)
        if e.manifest_key != mkey:
            raise CorruptCheckpointError(f"step {step}: marker names manifest {e.manifest_key!r}, expected {mkey}",
                                         step=step, key=mkey)
        for key, want in ((mkey, e.manifest_size), (skey, e.shard_size)):
            if key not in sizes:
                raise CorruptCheckpointError(f"step {step}: {key} is missing", step=step, key=key)
            if sizes[key] != want:
                raise CorruptCheckpointError(f"step {step}: {key} is {sizes[key]} bytes, expected {want} "
                                             "(truncated or replaced)", step=step, key=key)


def read_manifest(storage: Storage, marker: CommitMarker, rank: int) -> ShardManifest:
    step = marker.step
    entry = marker.shards[rank]
    key = layout.manifest_key(step, marker.attempt, rank, marker.world_size)
    try:
        data = storage.get(key, max_size=MAX_MANIFEST_BYTES)
    except ObjectNotFoundError:
        raise CorruptCheckpointError(f"step {step}: {key} is missing", step=step, key=key) from None
    if len(data) != entry.manifest_size or checksum.digest(data) != entry.manifest_xxh3_64:
        raise CorruptCheckpointError(f"step {step}: {key} does not match the digest in the commit marker",
                                     step=step, key=key)
    try:
        m = load_manifest(data)
    except ValueError as exc:
        raise CorruptCheckpointError(f"step {step}: {key} is invalid: {exc}", step=step, key=key) from None
    expected_shard = layout.shard_key(step, marker.attempt, rank, marker.world_size)
    if (m.step, m.rank, m.world_size, m.attempt, m.shard_key) != (
            step, rank, marker.world_size, marker.attempt, expected_shard):
        raise CorruptCheckpointError(f"step {step}: {key} describes another shard", step=step, key=key)
    return m


def read_shard(storage: Storage, m: ShardManifest, executor: Executor | None) -> np.ndarray:
    """The verified bytes of a shard (size, then every chunk digest)."""
    key, step = m.shard_key, m.step
    try:
        size = storage.stat(key).size
    except ObjectNotFoundError:
        raise CorruptCheckpointError(f"step {step}: shard {key} is missing", step=step, key=key) from None
    if size != m.shard_size:
        raise CorruptCheckpointError(f"step {step}: shard {key} is {size} bytes, the manifest says {m.shard_size} "
                                     "(truncated or replaced)", step=step, key=key)
    buf = np.empty(size, dtype=np.uint8)
    view = buf.data

    def fetch(i: int) -> bool:
        """Read chunk i (one ranged GET / pread) and check it while other chunks are in flight."""
        lo = i * m.chunk_size
        part = view[lo:min(size, lo + m.chunk_size)]
        storage.read_into(key, part, offset=lo)
        return checksum.digest(part) == m.chunks[i]

    try:
        n = len(m.chunks)
        good = list(executor.map(fetch, range(n))) if executor is not None and n > 1 else [fetch(i) for i in range(n)]
    except ObjectNotFoundError:
        raise CorruptCheckpointError(f"step {step}: shard {key} is missing", step=step, key=key) from None
    bad = next((i for i, ok in enumerate(good) if not ok), None)
    if bad is not None:
        lo, hi = bad * m.chunk_size, min(size, (bad + 1) * m.chunk_size)
        raise CorruptCheckpointError(f"step {step}: shard {key} bytes [{lo}, {hi}) fail their xxh3 checksum",
                                     step=step, key=key)
    return buf


def decode_shard(buf: np.ndarray, m: ShardManifest) -> Any:
    """Rebuild the state from verified shard bytes (arrays are views into ``buf``)."""
    try:
        parsed = parse_shard(buf.data)
        torch = torchcompat.import_torch() if tree_has_torch(m.tree) else None
        return unflatten(m.tree, lambda name: tensor_bytes(buf, parsed, name), torch=torch)
    except (ValueError, RecursionError) as exc:
        raise CorruptCheckpointError(f"step {m.step}: shard {m.shard_key} cannot be decoded: {exc}",
                                     step=m.step, key=m.shard_key) from None


def load_step(storage: Storage, step: int, *, rank: int, world_size: int | None,
              executor: Executor | None) -> Any:
    """Verify and decode one rank's state of one committed step.

    Raises:
        WorldSizeMismatchError: ``world_size`` is given and differs from the saved one.
        CorruptCheckpointError: anything about the step's data is wrong.
    """
    marker = read_marker(storage, step)
    if world_size is not None and marker.world_size != world_size:
        raise WorldSizeMismatchError(
            f"step {step} under {storage.uri} was saved by {marker.world_size} rank(s) but {world_size} are "
            f"restoring it; restore with the same world size, or pass rank= to read one saved shard explicitly",
            saved=marker.world_size, current=world_size)
    if not 0 <= rank < marker.world_size:
        raise RestoreError(f"rank {rank} is out of range: step {step} has ranks 0..{marker.world_size - 1}")
    check_structure(storage, marker)
    m = read_manifest(storage, marker, rank)
    return decode_shard(read_shard(storage, m, executor), m)


def restore_state(storage: Storage, *, step: int | None, rank: int, world_size: int | None,
                  executor: Executor | None, coordinator: Coordinator | None = None,
                  agree_timeout: float = 600.0) -> tuple[int, Any] | None:
    """Restore ``step`` (or the newest valid step) for ``rank``; None when nothing is committed.

    Raises:
        RestoreError: ``step`` is not committed, or no committed step is valid.
        CorruptCheckpointError: the explicitly requested ``step`` fails verification.
        WorldSizeMismatchError: the world size differs.
    """
    committed = list_committed(storage)
    if step is not None:
        if step not in committed:
            shown = committed[-10:]
            raise RestoreError(f"step {step} is not committed under {storage.uri} (newest committed: {shown})")
        candidates = [step]
    else:
        candidates = committed[::-1]
    if not candidates:
        return None
    failures: list[str] = []
    for s in candidates:
        state: Any = None
        try:
            state = load_step(storage, s, rank=rank, world_size=world_size, executor=executor)
            ok = True
        except CorruptCheckpointError as exc:
            if step is not None:
                raise
            ok = False
            failures.append(str(exc))
            msg = f"checkpoint step {s} failed verification ({exc}); falling back to the previous step"
            log.warning(msg)
            warnings.warn(msg, CheckpointFallbackWarning, stacklevel=3)
        if coordinator is not None and not coordinator.agree(ok, timeout=agree_timeout) and ok:
            failures.append(f"step {s}: another rank failed to verify it")
            warnings.warn(f"checkpoint step {s} failed verification on another rank; falling back",
                          CheckpointFallbackWarning, stacklevel=3)
            continue
        if ok:
            return s, state
    raise RestoreError(f"no valid checkpoint under {storage.uri}: all {len(candidates)} committed step(s) failed "
                       f"verification; newest problem: {failures[0] if failures else 'unknown'}")


@dataclass
class VerifyReport:
    step: int
    world_size: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_step(storage: Storage, step: int, *, executor: Executor | None = None,
                progress: Callable[[int], None] | None = None) -> VerifyReport:
    """Verify every rank's shard of a step chunk by chunk (bounded memory); report, do not raise
    for data problems. ``progress(nbytes)`` is called as bytes are verified."""
    report = VerifyReport(step)
    try:
        marker = read_marker(storage, step)
        report.world_size = marker.world_size
        check_structure(storage, marker)
    except CorruptCheckpointError as exc:
        report.problems.append(str(exc))
        return report
    for rank in range(marker.world_size):
        try:
            m = read_manifest(storage, marker, rank)
        except CorruptCheckpointError as exc:
            report.problems.append(str(exc))
            continue

        def chunk_ok(i: int, m: ShardManifest = m) -> bool:
            lo = i * m.chunk_size
            buf = bytearray(min(m.chunk_size, m.shard_size - lo))
            storage.read_into(m.shard_key, memoryview(buf), offset=lo)
            good = checksum.digest(buf) == m.chunks[i]
            if progress:
                progress(len(buf))
            return good

        n = len(m.chunks)
        results = list(executor.map(chunk_ok, range(n))) if executor is not None else [chunk_ok(i) for i in range(n)]
        bad = [i for i, good in enumerate(results) if not good]
        if bad:
            report.problems.append(f"step {step}: shard {m.shard_key} has {len(bad)} corrupt chunk(s), "
                                   f"first at byte {bad[0] * m.chunk_size}")
        report.bytes += m.shard_size
    return report
