"""Checkpoint progress, read off the poll path: each job's newest commit marker, within budgets.

A checkpoint prefix belongs to its job's user, so its contents are hostile input: a ``commits/``
holding 100,000 objects or a 10,000-deep directory tree, a store that hangs or raises. The
reader therefore runs as its own task on its own small thread pool (never the event loop's default
executor the store uses), lists only the marker level (one directory, never a recursive walk; one
delimited S3 listing), and stops at a per-read time and key budget. A job over budget or failing
gets an unknown reading, logged once, and is retried later; no other job waits for it, and the
queue poll only ever reads the in-memory table.

A ``file://`` prefix is read with its job's user's rights: the directory is opened by that user
(security.useropen) and must be theirs, and ``commits/`` is reached from that descriptor
without following links (security.userdir), so a job pointed at root's or another user's
directory learns nothing of it; without a known user such a prefix is not read at all.
S3 is read with the service's credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from clusterctl.storage import open_storage, parse_uri
from clusterctl.storage.errors import ObjectNotFoundError
from clusterctl.storage.s3 import S3Storage
from clusterd.errors import FailedPrecondition
from clusterd.security.userdir import UserDirStorage, open_user_dir
from clusterd.security.useropen import FileMissing, owner_of

log = logging.getLogger(__name__)

_MARKER = re.compile(r"^([0-9]{12})\.json\Z")  # commits/<step:012d>.json (clusterctl.checkpoint.layout)
_COMMITS = "commits"
_CHECK_EVERY = 256  # directory entries between deadline checks


class OverBudget(Exception):
    """A read listed more keys or took longer than its budget allows."""


@dataclass(frozen=True)
class ProgressBudget:
    """Per-job bounds of one progress read, and how often a job is read."""

    seconds: float = 5.0  # one read's time budget
    max_keys: int = 1_000  # entries one read may list (retention keeps a handful)
    interval: float = 10.0  # between reads of one running job
    retry_after: float = 300.0  # after a read over budget or failing
    workers: int = 4  # reads in flight at once, all jobs together


# (uri, max_keys, deadline on time.monotonic()) -> newest committed step, -1 when none.
StepLister = Callable[[str, int, float], int]
# (user, directory) -> the directory as that user opened it (raises like useropen.open_as).
DirOpener = Callable[[str, str], Awaitable[UserDirStorage]]


def _newest(names: list[str]) -> int:
    steps = [int(m.group(1)) for m in map(_MARKER.match, names) if m]
    return max(steps, default=-1)


def posix_steps(commits_fd: int, max_keys: int, deadline: float) -> int:
    """Newest marker in the open ``commits/`` directory ``commits_fd`` (not closed here)."""
    names: list[str] = []
    with os.scandir(commits_fd) as entries:
        for count, entry in enumerate(entries, 1):
            if count > max_keys:
                raise OverBudget(f"more than {max_keys} entries under {_COMMITS}/")
            if count % _CHECK_EVERY == 0 and time.monotonic() > deadline:
                raise OverBudget(f"listing {_COMMITS}/ ran out of time after {count} entries")
            if entry.is_file(follow_symlinks=False):
                names.append(entry.name)
    return _newest(names)


def user_dir_steps(root: UserDirStorage, max_keys: int, deadline: float) -> int:
    """Newest committed step below a directory its user opened (closed here); -1 without ``commits/``."""
    try:
        try:
            fd = root.open_dir(_COMMITS)
        except ObjectNotFoundError:
            return -1
        try:
            return posix_steps(fd, max_keys, deadline)
        finally:
            os.close(fd)
    finally:
        root.close()


async def open_as_user(user: str, directory: str) -> UserDirStorage:
    """``directory`` opened by ``user`` (their own, else refused). Raises FailedPrecondition without a user."""
    if not user:
        raise FailedPrecondition("the job's user is not known: a file:// prefix is read only with its rights")
    owner = await asyncio.to_thread(owner_of, user)
    return await open_user_dir(owner, directory, f"file://{directory}", field="checkpoint_uri")


def _s3_steps(storage: S3Storage, max_keys: int, deadline: float) -> int:
    prefix = f"{storage.prefix}/{_COMMITS}/" if storage.prefix else f"{_COMMITS}/"
    pages = storage.client.get_paginator("list_objects_v2").paginate(
        Bucket=storage.bucket, Prefix=prefix, Delimiter="/", PaginationConfig={"PageSize": 1000}
    )
    names: list[str] = []
    count = 0
    for page in pages:
        contents = page.get("Contents", [])
        count += len(contents) + len(page.get("CommonPrefixes", []))
        if count > max_keys:
            raise OverBudget(f"more than {max_keys} keys under {_COMMITS}/")
        if time.monotonic() > deadline:
            raise OverBudget(f"listing {_COMMITS}/ ran out of time after {count} keys")
        names += [obj["Key"][len(prefix) :] for obj in contents]
    return _newest(names)


def list_steps(uri: str, max_keys: int, deadline: float) -> int:
    """Newest committed step under the S3 ``uri`` (-1: none), listing at most ``max_keys`` marker-level keys.

    Raises OverBudget, or whatever the store raises (the reader contains both per job). A
    ``file://`` prefix is not read here: the reader opens it as its user (:func:`user_dir_steps`).
    """
    storage = open_storage(uri)
    try:
        if not isinstance(storage, S3Storage):
            raise FailedPrecondition(f"{uri}: only S3 is listed by path; a directory is read as its user")
        return _s3_steps(storage, max_keys, deadline)
    finally:
        storage.close()


def _is_file(uri: str) -> bool:
    try:
        return parse_uri(uri).scheme == "file"
    except ValueError:
        return False


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[_Job], None], job: _Job) -> None:
    """From a worker thread: run ``fn`` on the loop, unless the loop has already closed (shutdown)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, job)


@dataclass(frozen=True)
class Reading:
    """What the reader knows of one job: ``step`` -1 = no checkpoint yet, None = unknown."""

    step: int | None = None
    read_at: float = 0.0  # wall time the last finished read started; 0 = never
    error: str = ""  # why the last read gave no answer ("" after a good read)


@dataclass
class _Job:
    uri: str
    user: str = ""  # whose rights a file:// prefix is read with
    reading: Reading = field(default_factory=Reading)
    due: float = 0.0  # monotonic time of the next read
    in_flight: bool = False  # a worker thread still runs this job's read (even past its budget)


class ProgressReader:
    """Keeps the newest committed step of each followed job, read by its own task within budgets."""

    def __init__(
        self, budget: ProgressBudget | None = None, *, lister: StepLister = list_steps, opener: DirOpener = open_as_user
    ) -> None:
        self._budget = budget or ProgressBudget()
        self._lister = lister
        self._opener = opener
        self._jobs: dict[int, _Job] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._wake = asyncio.Event()
        self._threads = 0  # reads whose worker thread has not returned yet

    def follow(self, key: int, uri: str, *, user: str = "") -> None:
        """Start (or keep) reading the progress of record ``key`` at ``uri``, owned by ``user``
        ("" keeps the user already known for that record and URI)."""
        job = self._jobs.get(key)
        if job is None or job.uri != uri or (user and job.user != user):
            self._jobs[key] = _Job(uri, user or (job.user if job is not None and job.uri == uri else ""))
            self._wake.set()

    def forget(self, key: int) -> None:
        self._jobs.pop(key, None)

    def reading(self, key: int) -> Reading:
        job = self._jobs.get(key)
        return job.reading if job is not None else Reading()

    def refresh(self, key: int) -> None:
        """Read ``key`` again as soon as a worker is free (e.g. its run just ended)."""
        job = self._jobs.get(key)
        if job is not None and job.due > time.monotonic():
            job.due = 0.0
            self._wake.set()

    async def read_due(self) -> None:
        """Start every due read and wait for them, each bounded by the time budget."""
        await asyncio.gather(*self._start_due())

    async def run(self, stop: asyncio.Event) -> None:
        """Start due reads until ``stop`` is set; reads run as their own tasks, never awaited here."""
        tick = min(1.0, self._budget.interval)
        tasks: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            self._wake.clear()
            for task in self._start_due():
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
            _, pending = await asyncio.wait(waiters, timeout=tick, return_when=asyncio.FIRST_COMPLETED)
            for fut in pending:
                fut.cancel()
        for task in list(tasks):
            task.cancel()

    def close(self) -> None:
        """Drop the pool without waiting: a read stuck in a hung store must not hold up shutdown."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _start_due(self) -> list[asyncio.Task[None]]:
        now = time.monotonic()
        started = []
        for key, job in list(self._jobs.items()):
            if self._threads >= self._budget.workers:
                break
            if job.in_flight or job.due > now:
                continue
            job.in_flight = True  # counted here, not in the task: the cap holds before any task runs
            self._threads += 1
            started.append(asyncio.create_task(self._read(key, job)))
        return started

    async def _read(self, key: int, job: _Job) -> None:
        budget = self._budget
        if self._pool is None:
            self._pool = ThreadPoolExecutor(budget.workers, thread_name_prefix="ckpt-progress")
        began = time.time()
        loop = asyncio.get_running_loop()
        lister: Callable[[int, float], int] = functools.partial(self._lister, job.uri)
        root: UserDirStorage | None = None
        if _is_file(job.uri):
            try:
                root = await asyncio.wait_for(self._opener(job.user, parse_uri(job.uri).prefix), budget.seconds)
            except FileMissing:
                root = None
            except TimeoutError:
                self._thread_done(job)
                self._failed(key, job, f"not opened within {budget.seconds:g} s")
                return
            except Exception as exc:  # refused, no user, no account: this job's reading only
                self._thread_done(job)
                self._failed(key, job, f"{type(exc).__name__}: {exc}")
                return
            if root is None:
                self._thread_done(job)
                self._read_ok(key, job, -1, began)
                return
            lister = functools.partial(user_dir_steps, root)
        # The cap keeps a free worker for this read, so its thread starts now; the store's deadline
        # is still taken in the thread, so a read never spends its budget waiting for a worker.
        try:
            future: Future[int] = self._pool.submit(self._list, lister)
        except RuntimeError:  # the pool was shut down: the reader is closing
            if root is not None:
                root.close()
            self._thread_done(job)
            return
        if root is not None:  # user_dir_steps closes it; a read cancelled before it ran does here
            opened = root
            future.add_done_callback(lambda f: opened.close() if f.cancelled() else None)
        future.add_done_callback(lambda _: _call_soon(loop, self._thread_done, job))
        try:
            step = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), budget.seconds)
        except TimeoutError:
            self._failed(key, job, f"no answer within {budget.seconds:g} s")
        except Exception as exc:  # RecursionError, StorageError, OverBudget, botocore's: anything but cancel
            self._failed(key, job, f"{type(exc).__name__}: {exc}")
        else:
            self._read_ok(key, job, step, began)

    def _read_ok(self, key: int, job: _Job, step: int, began: float) -> None:
        if job.reading.error:
            log.info("checkpoint progress of record %d readable again (step %d)", key, step)
        job.reading = Reading(step, began)
        job.due = time.monotonic() + self._budget.interval

    def _list(self, lister: Callable[[int, float], int]) -> int:
        return lister(self._budget.max_keys, time.monotonic() + self._budget.seconds)

    def _thread_done(self, job: _Job) -> None:
        job.in_flight = False
        self._threads -= 1

    def _failed(self, key: int, job: _Job, why: str) -> None:
        if not job.reading.error:  # once per bad spell, not once per retry
            log.warning(
                "checkpoint progress of record %d (%s) unknown: %s; next try in %g s",
                key,
                job.uri,
                why,
                self._budget.retry_after,
            )
        job.reading = Reading(None, job.reading.read_at, why)
        job.due = time.monotonic() + self._budget.retry_after
