"""The save pipeline of one rank: snapshot (blocking) then serialize + checksum + upload (background).

This module only writes what it is given into storage; deciding when a step becomes visible is
``commit.py``'s job.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..storage import Storage
from . import checksum, commit, layout, torchcompat
from .manifest import FORMAT_VERSION, ShardManifest
from .shard import plan_shard
from .staging import StagingBuffer, StagingPool
from .tree import flatten


@dataclass
class Snapshot:
    """A state copied into one staging buffer laid out as the final shard file."""

    step: int
    attempt: str
    rank: int
    world_size: int
    tree: dict[str, Any]
    staging: StagingBuffer
    tensor_count: int
    seconds: float
    segments: list[int]  # where checksum chunking restarts: 0 and the start of every large tensor

    @property
    def nbytes(self) -> int:
        return int(self.staging.array.nbytes)


def take_snapshot(
    state: Mapping[str, Any], *, step: int, attempt: str, rank: int, world_size: int, pool: StagingPool
) -> Snapshot:
    """Copy ``state`` into staging memory; after this returns the caller may mutate its state.

    numpy arrays and CPU tensors are copied with ``np.copyto`` straight into their final place in
    the shard layout; CUDA tensors are copied asynchronously into pinned staging memory and
    synchronized before returning.

    Raises:
        InvalidStateError: unsafe key or unsupported leaf (nothing was allocated).
        StagingLimitError: the snapshot does not fit the configured staging memory.
    """
    t0 = time.perf_counter()
    tree, leaves = flatten(state, rank, world_size)
    plan = plan_shard(
        leaves,
        {
            "format": "clusterctl.checkpoint",
            "format_version": str(FORMAT_VERSION),
            "step": str(step),
            "rank": str(rank),
            "world_size": str(world_size),
        },
    )
    for leaf, offset in plan.slots:
        leaf.node["off"] = [offset, offset + leaf.nbytes]
    has_cuda = any(leaf.array is None for leaf in leaves)
    staging = pool.acquire(plan.total_size, pinned=has_cuda and torchcompat.cuda_available())
    try:
        buf = staging.array
        buf[: len(plan.header)] = np.frombuffer(plan.header, dtype=np.uint8)
        for leaf, offset in plan.slots:
            if leaf.nbytes == 0:
                continue
            dest = buf[offset : offset + leaf.nbytes]
            if leaf.array is None:
                torchcompat.copy_cuda_into(leaf.source, dest)
            else:
                src = leaf.array
                np.copyto(dest.view(src.dtype).reshape(src.shape), src, casting="no")
        if has_cuda:
            torchcompat.synchronize()
    except BaseException:
        staging.release()
        raise
    big = [(off, off + leaf.nbytes) for leaf, off in plan.slots if leaf.nbytes >= checksum.CHUNK_SIZE]
    segments = [0] + [x for span in big for x in span if 0 < x < plan.total_size]
    return Snapshot(
        step, attempt, rank, world_size, tree, staging, len(leaves), time.perf_counter() - t0, sorted(set(segments))
    )


def upload_snapshot(
    snap: Snapshot,
    storage: Storage,
    *,
    chunk_size: int = checksum.CHUNK_SIZE,
    executor: Executor | None,
    progress: dict[str, str | None],
    writer: str | None = None,
) -> tuple[str, ShardManifest]:
    """Checksum and upload the shard, release its staging memory, then write the shard manifest.

    ``writer`` (this process) first claims the rank of the attempt, so that a second process saving
    the same rank fails before it overwrites a byte (``commit.claim_rank``).
    ``progress["key"]`` names the object being written, for error messages.
    Returns the manifest key and the manifest.
    """
    shard_key = layout.shard_key(snap.step, snap.attempt, snap.rank, snap.world_size)
    manifest_key = layout.manifest_key(snap.step, snap.attempt, snap.rank, snap.world_size)
    try:
        data = snap.staging.array.data
        # checksums (CPU) run beside the upload (I/O) over the same immutable buffer
        digests = executor.submit(checksum.chunk_digests, data, chunk_size, None, snap.segments) if executor else None
        prefix = progress["key"] = layout.attempt_prefix(snap.step, snap.attempt)
        storage.prepare_prefix(prefix)
        if writer is not None:
            progress["key"] = layout.writer_key(snap.step, snap.attempt, snap.rank, snap.world_size)
            commit.claim_rank(
                storage, step=snap.step, attempt=snap.attempt, rank=snap.rank, world_size=snap.world_size, writer=writer
            )
        progress["key"] = shard_key
        storage.put(shard_key, data)
        size = len(data)
        chunks = digests.result() if digests else checksum.chunk_digests(data, chunk_size, None, snap.segments)
    finally:
        snap.staging.release()
    manifest = ShardManifest(
        step=snap.step,
        rank=snap.rank,
        world_size=snap.world_size,
        attempt=snap.attempt,
        shard_key=shard_key,
        shard_size=size,
        chunk_size=chunk_size,
        chunks=chunks,
        tree=snap.tree,
        tensor_count=snap.tensor_count,
        segments=snap.segments,
        created=time.time(),
        host=socket.gethostname(),
    )
    progress["key"] = manifest_key
    storage.put(manifest_key, manifest.to_json())
    return manifest_key, manifest
