"""Discovery, verification and restore of committed steps.

Discovery is one LIST of ``commits/``. Restoring a step reads its marker, checks the world size,
checks with one LIST that every rank's manifest and shard exist with the sizes the marker and
manifests promise (so all ranks reject a step with a missing or truncated shard alike), then
reads this rank's manifest (size and digest must match the marker) and shard (size, then every
chunk's xxh3 against the manifest), and only then parses the bounds-checked safetensors header
and rebuilds the tree. The structure LIST, the manifest and a small shard are requested together
(three requests, one round trip): a restart's restore is LIST, GET marker, then those. Other ranks'
manifests that the restore will need (resharding, replicated leaves) are then read in parallel.

Data problems raise :class:`CorruptCheckpointError`, which makes ``restore()`` fall back to the
previous step; storage outages propagate (falling back on a network blip would silently lose
progress).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..storage import ObjectNotFoundError, Storage, StorageError
from . import checksum, layout
from .assemble import Assembler, RankLocalPolicy, finish
from .coordination import Coordinator
from .errors import CheckpointFallbackWarning, CorruptCheckpointError, RestoreError
from .gc import list_committed
from .manifest import MAX_MANIFEST_BYTES, MAX_MARKER_BYTES, CommitMarker, ShardManifest, load_manifest, load_marker
from .ranges import RangeReader
from .shard import ParsedShard, parse_shard

log = logging.getLogger(__name__)
VERIFY_WINDOW = 64 << 20
PREFETCH_BYTES = 32 << 20  # a shard this small is read whole, together with its manifest (see _first_reads)


def read_marker(storage: Storage, step: int) -> CommitMarker:
    key = layout.commit_key(step)
    try:
        marker = load_marker(storage.get(key, max_size=MAX_MARKER_BYTES))
    except ObjectNotFoundError:
        raise CorruptCheckpointError(f"step {step}: commit marker {key} disappeared", step=step, key=key) from None
    except (ValueError, StorageError) as exc:
        if isinstance(exc, StorageError) and type(exc) is not StorageError:
            raise  # outages, access denied: not a property of the data
        raise CorruptCheckpointError(
            f"step {step}: commit marker {key} is invalid: {exc}", step=step, key=key
        ) from None
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
            raise CorruptCheckpointError(
                f"step {step}: marker names manifest {e.manifest_key!r}, expected {mkey}", step=step, key=mkey
            )
        for key, want in ((mkey, e.manifest_size), (skey, e.shard_size)):
            if key not in sizes:
                raise CorruptCheckpointError(f"step {step}: {key} is missing", step=step, key=key)
            if sizes[key] != want:
                raise CorruptCheckpointError(
                    f"step {step}: {key} is {sizes[key]} bytes, expected {want} (truncated or replaced)",
                    step=step,
                    key=key,
                )


def read_manifest(storage: Storage, marker: CommitMarker, rank: int) -> ShardManifest:
    step = marker.step
    entry = marker.shards[rank]
    key = layout.manifest_key(step, marker.attempt, rank, marker.world_size)
    try:
        data = storage.get(key, max_size=MAX_MANIFEST_BYTES)
    except ObjectNotFoundError:
        raise CorruptCheckpointError(f"step {step}: {key} is missing", step=step, key=key) from None
    if len(data) != entry.manifest_size or checksum.digest(data) != entry.manifest_xxh3_64:
        raise CorruptCheckpointError(
            f"step {step}: {key} does not match the digest in the commit marker", step=step, key=key
        )
    try:
        m = load_manifest(data)
    except ValueError as exc:
        raise CorruptCheckpointError(f"step {step}: {key} is invalid: {exc}", step=step, key=key) from None
    expected_shard = layout.shard_key(step, marker.attempt, rank, marker.world_size)
    if (m.step, m.rank, m.world_size, m.attempt, m.shard_key) != (
        step,
        rank,
        marker.world_size,
        marker.attempt,
        expected_shard,
    ):
        raise CorruptCheckpointError(f"step {step}: {key} describes another shard", step=step, key=key)
    return m


def _annotate_v1(tree: Any, parsed: ParsedShard) -> None:
    """Format 1 trees name their tensors only: give every tensor node its byte range from the header."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            raise ValueError("malformed tree node")
        items = node.get("items")
        if isinstance(items, dict):
            stack.extend(items.values())
        elif isinstance(items, list):
            stack.extend(items)
        elif isinstance(node.get("name"), str):
            if node["name"] not in parsed.tensors:
                raise ValueError(f"tensor {node['name'][:80]!r} is not in the shard")
            _, _, start, end = parsed.tensors[node["name"]]
            node["off"] = [start, end]
            if node.get("t") in ("bytes", "bytearray"):
                node["shape"] = [end - start]


class StepReader:
    """Everything one rank reads of one committed step: manifests on demand, verified byte ranges."""

    def __init__(self, storage: Storage, marker: CommitMarker, executor: Executor | None) -> None:
        self.storage = storage
        self.marker = marker
        self.executor = executor
        self._manifests: dict[int, ShardManifest] = {}
        self._read: dict[int, ShardManifest] = {}  # fetched ahead by prefetch(), not yet handed out
        self.ranges = RangeReader(storage, self.manifest, executor)

    def prefetch(self, ranks: set[int]) -> None:
        """Read these ranks' manifests now, in parallel: a restore that needs other ranks' manifests
        (resharding, replicated leaves stored by other ranks) pays one round trip, not one per rank.

        Raises:
            CorruptCheckpointError: a manifest is missing or does not match the marker.
        """
        todo = sorted(
            r for r in ranks if 0 <= r < self.marker.world_size and r not in self._manifests and r not in self._read
        )
        if self.executor is None or len(todo) < 2:
            return  # read on demand, as before
        for r, m in zip(
            todo, self.executor.map(lambda r: read_manifest(self.storage, self.marker, r), todo), strict=True
        ):
            self._read[r] = m

    def manifest(self, rank: int) -> ShardManifest:
        """Rank ``rank``'s manifest (read and checked once); format 1 trees get byte ranges from the header."""
        if not 0 <= rank < self.marker.world_size:
            raise ValueError(f"rank {rank} is not in the saved world of {self.marker.world_size}")
        if rank not in self._manifests:
            ahead = self._read.pop(rank, None)
            m = self._manifests[rank] = ahead or read_manifest(self.storage, self.marker, rank)
            if m.version == 1:
                self.ranges.want(rank, 0, m.shard_size)
                self.ranges.fetch()
                _annotate_v1(m.tree, parse_shard(self.ranges.view(rank, 0, m.shard_size).data))
        return self._manifests[rank]

    def tree(self, rank: int) -> dict[str, Any]:
        return self.manifest(rank).tree


def ranks_needed(tree: Any, *, foreign: bool, world: int) -> set[int]:
    """The saved ranks whose manifests a restore of ``tree`` (our base rank's) will read besides the base.

    The writers of replicated leaves (``"rank": r``); at another world size every rank when the tree
    holds a sharded leaf (its pieces are looked up in every rank) or a rank-local JSON value (compared
    across ranks). A malformed tree gives what it gives: the assembler reports it.
    """
    out: set[int] = set()
    everyone = False
    stack: list[tuple[Any, bool]] = [(tree, False)]
    while stack and not everyone:
        node, replicated = stack.pop()
        if not isinstance(node, dict):
            continue
        kind, rank, items = node.get("t"), node.get("rank"), node.get("items")
        if isinstance(rank, int) and not isinstance(rank, bool):
            out.add(rank)
        everyone = foreign and (kind == "sharded" or (kind == "json" and not replicated))
        if kind == "replicated":
            stack.append((node.get("v"), True))
        elif isinstance(items, dict):
            stack.extend((child, replicated) for child in items.values())
        elif isinstance(items, list):
            stack.extend(
                (i[1] if kind == "map" and isinstance(i, list) and len(i) == 2 else i, replicated) for i in items
            )
    return set(range(world)) if everyone else {r for r in out if 0 <= r < world}


def _read_whole(storage: Storage, key: str, size: int, step: int) -> np.ndarray:
    buf = np.empty(size, dtype=np.uint8)
    try:
        storage.read_into(key, buf.data)
    except ObjectNotFoundError:
        raise CorruptCheckpointError(f"step {step}: shard {key} is missing", step=step, key=key) from None
    return buf


def _first_reads(
    storage: Storage, marker: CommitMarker, reader: StepReader, rank: int, *, prefetch: bool, executor: Executor | None
) -> ShardManifest:
    """The structure LIST, ``rank``'s manifest and, for a small shard of our own, the whole shard: at once.

    They are independent once the marker is read, so a restore pays one round trip for the three
    instead of three in a row. The shard's bytes are checked against the manifest before anything
    reads them. Errors are raised in the order of the serial version: the structure first.
    """
    if executor is None:
        check_structure(storage, marker)
        return reader.manifest(rank)
    entry = marker.shards[rank]
    structure = executor.submit(check_structure, storage, marker)
    pending: list[Future[Any]] = [structure]
    shard = None
    if prefetch and 0 < entry.shard_size <= PREFETCH_BYTES:
        key = layout.shard_key(marker.step, marker.attempt, rank, marker.world_size)
        shard = executor.submit(_read_whole, storage, key, entry.shard_size, marker.step)
        pending.append(shard)
    try:
        m = reader.manifest(rank)
    finally:
        wait(pending)
    structure.result()
    if shard is not None:
        reader.ranges.add_read(rank, 0, shard.result())
    return m


def load_step(
    storage: Storage,
    step: int,
    *,
    rank: int,
    world_size: int | None,
    executor: Executor | None,
    template: Any = None,
    rank_local: RankLocalPolicy = "error",
) -> Any:
    """Verify and decode one rank's state of one committed step, at the layout wanted now.

    ``world_size`` None reads saved rank ``rank`` as it is (no resharding). Otherwise sharded and
    replicated leaves are mapped onto ``rank`` of ``world_size`` (``template`` gives the slices);
    rank-local leaves need the same world size or a ``rank_local`` policy.

    Raises:
        WorldSizeMismatchError: a rank-local leaf cannot be mapped (names the key).
        CorruptCheckpointError: anything about the step's data is wrong.
    """
    marker = read_marker(storage, step)
    foreign = world_size is not None and marker.world_size != world_size
    if not foreign and not 0 <= rank < marker.world_size:
        raise RestoreError(f"rank {rank} is out of range: step {step} has ranks 0..{marker.world_size - 1}")
    reader = StepReader(storage, marker, executor)
    base = 0 if foreign else rank
    try:
        m = _first_reads(storage, marker, reader, base, prefetch=not foreign, executor=executor)
        reader.prefetch(ranks_needed(m.tree, foreign=foreign, world=marker.world_size) - {base})
        asm = Assembler(
            tree=reader.tree,
            want=reader.ranges.want,
            view=reader.ranges.view,
            base_rank=base,
            saved_world=marker.world_size,
            rank=rank,
            world_size=world_size or marker.world_size,
            foreign=foreign,
            rank_local=rank_local,
            step=step,
        )
        planned = asm.plan(m.tree, template)
        if not foreign:  # the safetensors header of our own shard, so tools can still open it
            nodes = [n.get("v") if n.get("t") == "sharded" else n for n in asm.index(base).values()]
            offs = [n["off"][0] for n in nodes if isinstance(n, dict) and isinstance(n.get("off"), list)]
            reader.ranges.want(base, 0, min(offs, default=m.shard_size))
        reader.ranges.fetch()
        return finish(planned)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError, RuntimeError) as exc:
        raise CorruptCheckpointError(
            f"step {step}: the shards of {storage.uri} cannot be decoded: {type(exc).__name__}: {exc}", step=step
        ) from None


def restore_state(
    storage: Storage,
    *,
    step: int | None,
    rank: int,
    world_size: int | None,
    executor: Executor | None,
    coordinator: Coordinator | None = None,
    agree_timeout: float = 600.0,
    template: Any = None,
    rank_local: RankLocalPolicy = "error",
) -> tuple[int, Any] | None:
    """Restore ``step`` (or the newest valid step) for ``rank``; None when nothing is committed.

    Raises:
        RestoreError: ``step`` is not committed, no committed step is valid, or ``template`` has a
            leaf that cannot be restored into (names the key; no fallback to older steps for it).
        CorruptCheckpointError: the explicitly requested ``step`` fails verification.
        WorldSizeMismatchError: a rank-local leaf cannot be mapped to another world size.
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
            state = load_step(
                storage,
                s,
                rank=rank,
                world_size=world_size,
                executor=executor,
                template=template,
                rank_local=rank_local,
            )
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
            warnings.warn(
                f"checkpoint step {s} failed verification on another rank; falling back",
                CheckpointFallbackWarning,
                stacklevel=3,
            )
            continue
        if ok:
            return s, state
    raise RestoreError(
        f"no valid checkpoint under {storage.uri}: all {len(candidates)} committed step(s) failed "
        f"verification; newest problem: {failures[0] if failures else 'unknown'}"
    )


@dataclass
class VerifyReport:
    step: int
    world_size: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_step(
    storage: Storage, step: int, *, executor: Executor | None = None, progress: Callable[[int], None] | None = None
) -> VerifyReport:
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

        bad: list[int] = []
        starts, windows = m.starts(), list[int]()
        for s in starts:  # windows of whole chunks, about VERIFY_WINDOW bytes each: bounded memory
            if not windows or s - windows[-1] >= VERIFY_WINDOW:
                windows.append(s)
        for lo, hi in zip(windows, [*windows[1:], m.shard_size], strict=True):
            reader = RangeReader(storage, lambda _r, m=m: m, executor)  # type: ignore[misc]
            reader.want(rank, lo, hi)
            try:
                reader.fetch()
            except CorruptCheckpointError as exc:
                bad.append(lo)
                report.problems.append(str(exc))
            if progress:
                progress(hi - lo)
        if bad:
            report.problems.append(f"step {step}: shard {m.shard_key} is corrupt, first bad window at byte {bad[0]}")
        report.bytes += m.shard_size
    return report
