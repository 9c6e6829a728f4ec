"""The tier as a :class:`~clusterctl.storage.Storage`, so the checkpoint pipeline runs on it unchanged.

:class:`TierStorage` is what a rank saves into: puts go to the node's own tier (which replicates
them before it answers); reads try the node's tier, then each peer in placement order, skipping a
copy that is missing, unreachable or fails its digest; listings are the union of every reachable
tier (rank 0 sees every rank's manifest). :class:`ChainStorage` is what a rank restores from: the
tiers first, then the job's URI, so the same manifests, hashes and resharding reader apply to a
copy from memory, from a peer or from S3.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from ..storage import IncompleteUpload, ObjectInfo, ObjectNotFoundError, Storage, StorageError, validate_key
from ..storage.base import Buffer
from .client import TierClient
from .errors import TierCorruptError, TierError

log = logging.getLogger(__name__)
T = TypeVar("T")
READ_PIECE = 16 << 20


class TierStorage:
    """The job's memory tiers under one namespace (the checkpoint URI)."""

    def __init__(self, local: TierClient, peers: Sequence[TierClient], ns: str, *, concurrency: int = 4) -> None:
        self.local = local
        self.peers = list(peers)
        self.ns = ns
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tier-read")

    @property
    def uri(self) -> str:
        return f"memory tier of {self.ns}"

    def _first(self, key: str, fn: Callable[[TierClient], T]) -> T:
        missing = True
        last: Exception | None = None
        for tier in [self.local, *self.peers]:
            try:
                return fn(tier)
            except ObjectNotFoundError:
                continue
            except TierCorruptError as exc:
                log.warning("memory tier: skipped a corrupt copy of %s at %s: %s", key, tier.address, exc)
                missing, last = False, exc
            except TierError as exc:
                last = exc
        if missing and last is None:
            raise ObjectNotFoundError(f"{key} is in no memory tier of this job", key=key)
        raise StorageError(f"{key}: no good copy in the job's memory tiers (last: {last})", key=key)

    def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
        validate_key(key)
        self.local.put(self.ns, key, memoryview(data), if_absent=if_absent, digest=False)

    def get(self, key: str, *, max_size: int | None = None) -> bytes:
        validate_key(key)
        if max_size is not None:
            size = self.stat(key).size
            if size > max_size:
                raise StorageError(f"{key} is {size} bytes, more than the {max_size} expected", key=key)
        return self._first(key, lambda t: t.get(self.ns, key))

    def read_into(self, key: str, out: memoryview, *, offset: int = 0) -> None:
        validate_key(key)
        self._first(key, lambda t: self._parallel_read(t, key, out.cast("B"), offset))

    def _parallel_read(self, tier: TierClient, key: str, out: memoryview, offset: int) -> None:
        """One source's copy of a range, in pieces over parallel connections (a shard is GiBs)."""
        if len(out) <= READ_PIECE:
            tier.read_into(self.ns, key, out, offset=offset)
            return
        starts = range(0, len(out), READ_PIECE)
        futures = [
            self._pool.submit(tier.read_into, self.ns, key, out[a : a + READ_PIECE], offset=offset + a) for a in starts
        ]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in done if f.exception() is not None), None)
        if failed is not None:  # the next source rewrites ``out``: no piece of this one may land after it
            for future in futures:
                future.cancel()
            wait(futures)
            failed.result()

    def stat(self, key: str) -> ObjectInfo:
        validate_key(key)
        return self._first(key, lambda t: t.stat(self.ns, key))

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        validate_key(prefix, allow_empty=True, what="prefix")
        seen: dict[str, ObjectInfo] = {}
        for tier in [self.local, *self.peers]:
            try:
                for obj in tier.list(self.ns, prefix):
                    seen.setdefault(obj.key, obj)
            except TierError as exc:
                if tier is self.local:
                    raise
                log.info("memory tier: %s not listed: %s", tier.address, exc)
        return sorted(seen.values(), key=lambda o: o.key)

    def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            validate_key(key)
        self.local.delete(self.ns, list(keys))

    def prepare_prefix(self, prefix: str) -> None:
        validate_key(prefix, allow_empty=True, what="prefix")

    def list_incomplete(self, prefix: str) -> list[IncompleteUpload]:
        return []  # a tier's puts are all-or-nothing in memory

    def abort_incomplete(self, upload: IncompleteUpload) -> None:
        pass

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for tier in [self.local, *self.peers]:
            tier.close()


class ChainStorage:
    """Read-only: the memory tiers first, then the URI (restore's order of sources).

    A listing of the URI that does not answer within ``list_timeout`` (S3 frozen) is left out with a
    warning, so a job can resume from memory while its URI is down; while that listing still hangs,
    the next ones of its prefix leave the URI out at once rather than each waiting ``list_timeout``
    behind it. When neither the tiers nor the URI answer, a listing raises: an empty answer would
    read as "no checkpoint" and start the job from scratch.
    """

    def __init__(self, tiers: TierStorage, durable: Storage, *, list_timeout: float = 10.0) -> None:
        self.tiers = tiers
        self.durable = durable
        self._timeout = list_timeout
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tier-list")
        self._hung: dict[str, Future[list[ObjectInfo]]] = {}  # per prefix: a listing of the URI that timed out
        self._lock = threading.Lock()

    @property
    def uri(self) -> str:
        return self.durable.uri

    def _either(self, key: str, fn: Callable[[Storage], T]) -> T:
        try:
            return fn(self.tiers)
        except StorageError as exc:
            if not isinstance(exc, ObjectNotFoundError):
                log.warning("memory tier: %s from %s instead: %s", key, self.durable.uri, exc)
            return fn(self.durable)

    def get(self, key: str, *, max_size: int | None = None) -> bytes:
        return self._either(key, lambda s: s.get(key, max_size=max_size))

    def read_into(self, key: str, out: memoryview, *, offset: int = 0) -> None:
        self._either(key, lambda s: s.read_into(key, out, offset=offset))

    def stat(self, key: str) -> ObjectInfo:
        return self._either(key, lambda s: s.stat(key))

    def list_objects(self, prefix: str) -> list[ObjectInfo]:
        tiers_failed: StorageError | None = None
        try:
            seen = {o.key: o for o in self.tiers.list_objects(prefix)}
        except StorageError as exc:  # the node's tier is gone or an impostor: the URI alone
            log.warning("memory tier: not listed (%s); using %s only", exc, self.uri)
            seen, tiers_failed = {}, exc
        with self._lock:
            hung = self._hung.get(prefix)
            if hung is not None and hung.done():
                del self._hung[prefix]
                hung = None
            future = hung or self._pool.submit(self.durable.list_objects, prefix)
        try:
            if hung is not None:
                raise FutureTimeout
            for obj in future.result(timeout=self._timeout):
                seen.setdefault(obj.key, obj)
        except FutureTimeout:
            with self._lock:
                self._hung.setdefault(prefix, future)
            why = f"{self.uri} does not answer a listing of {prefix!r} (waited {self._timeout:g} s)"
            if tiers_failed is not None:
                raise StorageError(f"neither the memory tiers ({tiers_failed}) nor the URI listed: {why}") from None
            log.warning("memory tier: %s; using memory only", why)
        except StorageError as exc:
            if tiers_failed is not None:
                raise StorageError(f"neither the memory tiers ({tiers_failed}) nor {self.uri} listed: {exc}") from exc
            log.warning("memory tier: %s not listed (%s); using memory only", self.uri, exc)
        return sorted(seen.values(), key=lambda o: o.key)

    def put(self, key: str, data: Buffer, *, if_absent: bool = False) -> None:
        raise StorageError("restore storage is read-only", key=key)

    def delete(self, keys: Sequence[str]) -> None:
        raise StorageError("restore storage is read-only")

    def prepare_prefix(self, prefix: str) -> None:
        pass

    def list_incomplete(self, prefix: str) -> list[IncompleteUpload]:
        return []

    def abort_incomplete(self, upload: IncompleteUpload) -> None:
        pass

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
