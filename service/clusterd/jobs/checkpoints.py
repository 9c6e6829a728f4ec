"""A job's committed checkpoints for the dashboard: step, size, and whether they verify.

Listing reads the commit markers (one LIST plus one small GET per step, newest ``_MAX_STEPS``)
within ``views.checkpoint_list_seconds`` and is reused for ``views.checkpoint_cache_seconds``, so
a page polling every few seconds costs one listing per interval, not one per request. Verifying
reads every shard back (clusterctl.checkpoint.restore.verify_step), so it is done for the newest
step only, when its size is within ``views.checkpoint_verify_max_bytes``, one step at a time in
the background, and remembered per (URI, step): a committed step never changes.

A checkpoint prefix is its user's to fill, so everything runs on this module's own two worker
threads (never the event loop's executor) and a slow or hostile store yields an error line on the
page, not a stalled service. S3 is read with the service's credentials, as the progress reader
does. A POSIX directory is opened once by the job's user (security.useropen) and must be theirs;
every marker and shard below it is then read through that descriptor, never by its path again,
and only when it is a regular file of that user (security.userdir): a link swapped in after the
check, a FIFO, or root's files show as an error line, never as steps, sizes or read bytes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from clusterctl.storage import Storage, open_storage, parse_uri
from clusterd.auth.identity import Identity
from clusterd.config import ViewsConfig
from clusterd.errors import ServiceError
from clusterd.jobs.manager import JobManager
from clusterd.security.userdir import open_user_dir
from clusterd.security.useropen import owner_of

log = logging.getLogger(__name__)

_MAX_STEPS = 50
_MAX_VERDICTS = 1000

T = TypeVar("T")
Opener = Callable[[], Storage]  # runs in a worker thread: the store to read, closed by the reader


@dataclass(frozen=True)
class StepInfo:
    step: int
    bytes: int
    world_size: int
    committed_at: float
    verification: str  # verified | corrupt | verifying | unverified | invalid-marker
    detail: str = ""


@dataclass(frozen=True)
class CheckpointList:
    uri: str
    steps: list[StepInfo]
    error: str = ""


@dataclass(frozen=True)
class _Marker:
    step: int
    valid: bool
    bytes: int = 0
    world_size: int = 0
    created: float = 0.0


def _read_markers(opener: Opener) -> list[_Marker]:
    """Blocking: the newest committed steps' markers."""
    from clusterctl.checkpoint.commit import read_marker_or_none
    from clusterctl.checkpoint.gc import list_committed

    storage = opener()
    try:
        out = []
        for step in list_committed(storage)[-_MAX_STEPS:]:
            marker = read_marker_or_none(storage, step)
            if marker is None:
                out.append(_Marker(step, False))
            else:
                out.append(_Marker(step, True, marker.total_bytes, marker.world_size, marker.created))
        return out
    finally:
        storage.close()


def _verify(opener: Opener, step: int) -> tuple[str, str]:
    """Blocking: ("verified", "") or ("corrupt", the first problem)."""
    from clusterctl.checkpoint.restore import verify_step

    storage = opener()
    try:
        report = verify_step(storage, step)
    finally:
        storage.close()
    return ("verified", "") if report.ok else ("corrupt", report.problems[0][:500])


class CheckpointViews:
    def __init__(self, manager: JobManager, views: ViewsConfig) -> None:
        self._manager = manager
        self._views = views
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="ckpt-view")
        self._listed: dict[tuple[str, str], tuple[float, CheckpointList]] = {}
        self._verdicts: OrderedDict[tuple[str, int], tuple[str, str]] = OrderedDict()
        self._verifying: set[tuple[str, int]] = set()
        self._tasks: set[asyncio.Future[tuple[str, str]]] = set()  # verifications under way (kept referenced)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def list(self, ident: Identity, job_id: str) -> CheckpointList:
        """The job's checkpoints (empty without a checkpoint URI). Raises like JobManager.get."""
        rec = await self._manager.get(ident, job_id, with_spec=True)
        uri = rec.spec.checkpoint_uri
        if not uri:
            return CheckpointList("", [])
        cached = self._listed.get((rec.user, uri))  # per user: a directory is listed with its user's rights
        if cached is not None and time.monotonic() - cached[0] < self._views.checkpoint_cache_seconds:
            return self._with_verdicts(cached[1])
        listing = await self._list(uri, rec.user)
        if len(self._listed) > _MAX_VERDICTS:
            self._listed.clear()
        self._listed[(rec.user, uri)] = (time.monotonic(), listing)
        return self._with_verdicts(listing)

    async def _opener(self, uri: str, user: str) -> tuple[Opener, Callable[[], None]]:
        """How a worker thread gets the store, and how to drop it unread: S3 with the service's
        credentials; a ``file://`` directory only as the descriptor its user opened (raises like
        useropen.open_as)."""
        parsed = parse_uri(uri)
        if parsed.scheme != "file":
            return functools.partial(open_storage, uri), lambda: None
        owner = await asyncio.to_thread(owner_of, user)
        store = await open_user_dir(owner, parsed.prefix, uri, field="checkpoint_uri", python=self._views.reader_python)
        return lambda: store, store.close

    async def _in_pool(self, fn: Callable[[Opener], T], uri: str, user: str) -> T:
        """``fn(opener)`` on the view's threads; a store opened for a read that never started is closed."""
        opener, drop = await self._opener(uri, user)
        future = self._pool.submit(fn, opener)

        def dropped(f: Future[T]) -> None:
            if f.cancelled():
                drop()

        future.add_done_callback(dropped)
        return await asyncio.wrap_future(future)

    async def _list(self, uri: str, user: str) -> CheckpointList:
        try:
            markers = await asyncio.wait_for(
                self._in_pool(_read_markers, uri, user), self._views.checkpoint_list_seconds
            )
        except TimeoutError:
            return CheckpointList(uri, [], f"listing took more than {self._views.checkpoint_list_seconds:g}s")
        except ServiceError as exc:
            return CheckpointList(uri, [], str(exc))
        except Exception as exc:  # the store's errors, botocore's, a hostile prefix: shown, not raised
            return CheckpointList(uri, [], f"{type(exc).__name__}: {exc}"[:500])
        steps = [
            StepInfo(
                m.step,
                m.bytes,
                m.world_size,
                m.created,
                "unverified" if m.valid else "invalid-marker",
                "" if m.valid else "the commit marker does not parse",
            )
            for m in markers
        ]
        newest = next((s for s in reversed(steps) if s.verification == "unverified"), None)
        if newest is not None:
            self._maybe_verify(uri, user, newest)
        return CheckpointList(uri, steps)

    def _maybe_verify(self, uri: str, user: str, step: StepInfo) -> None:
        key = (uri, step.step)
        if key in self._verdicts or key in self._verifying:
            return
        if step.bytes > self._views.checkpoint_verify_max_bytes:
            self._remember(
                key,
                (
                    "unverified",
                    f"larger than views.checkpoint_verify_max_bytes ({self._views.checkpoint_verify_max_bytes} bytes)",
                ),
            )
            return
        self._verifying.add(key)

        def done(fut: asyncio.Future[tuple[str, str]]) -> None:
            self._verifying.discard(key)
            if fut.cancelled():
                return
            exc = fut.exception()
            self._remember(key, ("unverified", f"verification failed: {exc}"[:500]) if exc else fut.result())

        task = asyncio.ensure_future(self._in_pool(functools.partial(_verify, step=step.step), uri, user))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(done)

    def _remember(self, key: tuple[str, int], verdict: tuple[str, str]) -> None:
        self._verdicts[key] = verdict
        while len(self._verdicts) > _MAX_VERDICTS:
            self._verdicts.popitem(last=False)

    def _with_verdicts(self, listing: CheckpointList) -> CheckpointList:
        steps = []
        for s in listing.steps:
            key = (listing.uri, s.step)
            if key in self._verifying:
                steps.append(StepInfo(s.step, s.bytes, s.world_size, s.committed_at, "verifying"))
            elif key in self._verdicts:
                state, detail = self._verdicts[key]
                steps.append(StepInfo(s.step, s.bytes, s.world_size, s.committed_at, state, detail))
            else:
                steps.append(s)
        return CheckpointList(listing.uri, steps, listing.error)
