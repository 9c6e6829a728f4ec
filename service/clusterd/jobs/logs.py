"""``clusterctl logs``: a job's stdout/stderr through the service, with the job owner's rights.

A read resolves the record's output path for the job (or one array task), opens it as the job's
user (clusterd.security.useropen: never with root's rights, never a file the user does not own),
and streams it in chunks: the whole file, or its last N lines. Following keeps the descriptor and
reads what is appended, like ``tail -f``, until the job is over. It survives requeues: Slurm
appends the next run's output to the same file (``--open-mode=append``, which the service sets);
after a restart the path is resolved again (``%N`` may name another node) and, when it is another
file, or the file was truncated (a plain sbatch job's default mode), reading starts at its top.
Followers wake on the job's events and every ``views.follow_interval_seconds`` otherwise; each
holds one of its user's watcher slots, so one user cannot open followers without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from clusterd.accounts import UnixAccount
from clusterd.auth.identity import Identity
from clusterd.config import ViewsConfig
from clusterd.errors import FailedPrecondition, InvalidArgument
from clusterd.jobs import logfile
from clusterd.jobs.manager import JobManager, check_job_id
from clusterd.jobs.outputs import OutputJob, expand
from clusterd.model.spec import JobSpec
from clusterd.security.useropen import FileMissing, open_as, owner_of
from clusterd.slurm.types import JobState
from clusterd.store.jobs import JobRecords
from clusterd.store.records import JobRecord
from clusterd.supervisor.cache import QueueCache
from clusterd.supervisor.events import EventBus

_REFRESH_SECONDS = 5.0  # a follower re-reads its record this often even without events (a lost one)


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    path: str
    offset: int
    notice: str
    state: JobState
    restart_count: int


@dataclass(frozen=True)
class _Target:
    path: str
    field: str
    notice: str


def _task_view(rec: JobRecord, task: int | None) -> tuple[JobState, int, bool, tuple[str, ...]]:
    """(state, restarts, over, nodes) of the job, or of one array task."""
    if task is None:
        return rec.state, rec.restart_count, rec.terminal, rec.nodes
    t = rec.array_tasks.get(task)
    if t is None:
        return JobState.PENDING, 0, rec.terminal, ()
    return t.state, t.restarts, rec.terminal or t.state.terminal, t.nodes


class JobLogs:
    def __init__(
        self, manager: JobManager, store: JobRecords, bus: EventBus, cache: QueueCache, views: ViewsConfig
    ) -> None:
        self._manager = manager
        self._store = store
        self._bus = bus
        self._cache = cache
        self._views = views
        self.reader_python = views.reader_python

    async def read(
        self, ident: Identity, job_id: str, *, stderr: bool = False, tail_lines: int = 0, follow: bool = False
    ) -> AsyncIterator[LogChunk]:
        """Chunks of the job's output, in file order. Raises InvalidArgument, NotFound,
        PermissionDenied (another user's job, a file the job's user may not read or does not own),
        FailedPrecondition (no file yet, an unresolvable path)."""
        if tail_lines > self._views.max_tail_lines:
            raise InvalidArgument("tail_lines", f"at most {self._views.max_tail_lines} (views.max_tail_lines)")
        rec = await self._manager.get(ident, job_id, with_spec=True)
        _, task = check_job_id(job_id)
        if rec.array and task is None:
            raise InvalidArgument("job_id", f"job {rec.job_id} is an array: name one task, e.g. {rec.job_id}_0")
        owner = await asyncio.to_thread(owner_of, rec.user)
        if follow:
            async for chunk in self._follow(ident, rec, task, owner, stderr=stderr, tail_lines=tail_lines):
                yield chunk
            return
        target = await self.resolve_target(rec, rec.spec, task, stderr)
        state, restarts, _over, _nodes = _task_view(rec, task)
        try:
            fd = await open_as(owner, target.path, field=target.field, python=self._views.reader_python)
        except FileMissing:
            if state == JobState.PENDING:
                raise FailedPrecondition(
                    f"job {job_id} has not started yet: {target.field} {target.path} "
                    "does not exist (logs -f waits for it)"
                ) from None
            raise
        try:
            if target.notice:
                yield LogChunk(b"", target.path, 0, target.notice, state, restarts)
            _dev, _ino, size = await asyncio.to_thread(logfile.identity, fd)
            offset = await asyncio.to_thread(logfile.tail_offset, fd, size, tail_lines)
            async for chunk in self.drain(fd, target.path, offset, state, restarts, stop_at=size):
                yield chunk
        finally:
            os.close(fd)

    async def resolve_target(self, rec: JobRecord, spec: JobSpec, task: int | None, stderr: bool) -> _Target:
        """The file to read: the record's pattern filled for the job or task (``spec``: the record's).

        The pattern is the user's text: it is filled in a worker thread, never on the event loop.
        """
        field = "stderr_path" if stderr and spec.stderr_path else "stdout_path"
        pattern = spec.stderr_path if field == "stderr_path" else spec.stdout_path
        notice = f"job {rec.job_id} writes stderr into its output file" if stderr and not spec.stderr_path else ""
        if not pattern:
            raise FailedPrecondition(f"job {rec.job_id} has no output path on record")
        element = rec.job_id
        if task is not None:
            element = next(
                (j.job_id for j in self._cache.snapshot.arrays.get(rec.job_id, ()) if j.array_task_id == task), ""
            )
        _state, _restarts, _over, nodes = _task_view(rec, task)
        job = OutputJob(
            job_id=element,
            array_id=rec.job_id,
            task_id=task,
            name=rec.name or spec.name,
            user=rec.user,
            first_node=nodes[0] if nodes else "",
        )
        return _Target(await asyncio.to_thread(expand, pattern, job, field=field), field, notice)

    async def drain(
        self, fd: int, path: str, offset: int, state: JobState, restarts: int, *, stop_at: int | None = None
    ) -> AsyncIterator[LogChunk]:
        """Chunks from ``offset`` to the end (or ``stop_at``); the last chunk's end is where to go on."""
        size = self._views.log_chunk_bytes
        while stop_at is None or offset < stop_at:
            want = size if stop_at is None else min(size, stop_at - offset)
            data = await asyncio.to_thread(logfile.read_at, fd, offset, want)
            if not data:
                return
            yield LogChunk(data, path, offset, "", state, restarts)
            offset += len(data)

    async def _follow(
        self, ident: Identity, rec: JobRecord, task: int | None, owner: UnixAccount, *, stderr: bool, tail_lines: int
    ) -> AsyncIterator[LogChunk]:
        changed = asyncio.Event()
        latest = [rec]
        spec = rec.spec
        sub = self._bus.subscribe(lambda ev: ev.record.record_id == rec.record_id, user=ident.user)

        async def consume() -> None:
            async for event in sub:
                latest[0] = event.record  # may be a compact record: the paths come from ``spec``
                changed.set()

        consumer = asyncio.create_task(consume())
        follower = _Follower(self, owner, spec, tail_lines)
        refreshed = time.monotonic()
        try:
            while True:
                if time.monotonic() - refreshed > _REFRESH_SECONDS or consumer.done():
                    fresh = await self._store.get_by_record(rec.record_id)
                    if fresh is not None:
                        latest[0] = fresh
                    refreshed = time.monotonic()
                cur = latest[0]
                over = _task_view(cur, task)[2]
                async for chunk in follower.step(cur, task, stderr):
                    yield chunk
                if over:
                    # Slurm closes the output before it reports the end; one more look after a pause
                    # catches what a slow filesystem showed late.
                    await asyncio.sleep(self._views.follow_interval_seconds)
                    async for chunk in follower.step(cur, task, stderr):
                        yield chunk
                    if follower.fd < 0:
                        state = _task_view(cur, task)[0]
                        yield LogChunk(
                            b"",
                            follower.path,
                            0,
                            f"the job ended ({state.value}) without writing {follower.path or 'its output'}",
                            state,
                            _task_view(cur, task)[1],
                        )
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), self._views.follow_interval_seconds)
                changed.clear()
        finally:
            consumer.cancel()
            self._bus.unsubscribe(sub)
            follower.close()


class _Follower:
    """One follower's file: which path, which descriptor, how far it has been read."""

    def __init__(self, logs: JobLogs, owner: UnixAccount, spec: JobSpec, tail_lines: int) -> None:
        self._logs = logs
        self._owner = owner
        self._spec = spec
        self._tail = tail_lines
        self.fd = -1
        self.path = ""
        self._file: tuple[int, int] | None = None
        self._offset = 0
        self._restarts: int | None = None
        self._waiting_told = False
        self._first_open = True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    async def step(self, rec: JobRecord, task: int | None, stderr: bool) -> AsyncIterator[LogChunk]:
        state, restarts, over, _nodes = _task_view(rec, task)
        notices: list[str] = []
        if self._restarts is not None and restarts != self._restarts:
            notices.append(f"job requeued (restart {restarts}): following its next run")
        self._restarts = restarts
        try:
            target = await self._logs.resolve_target(rec, self._spec, task, stderr)
        except FailedPrecondition:
            if over:
                raise
            target = None  # e.g. %N before the requeued job has a node: look again later
        if target is not None and (notices or target.path != self.path or self.fd < 0):
            notices += await self._open(target, state, over)
        for text in notices:
            yield LogChunk(b"", self.path, self._offset, text, state, restarts)
        if self.fd < 0:
            return
        _dev, _ino, size = await asyncio.to_thread(logfile.identity, self.fd)
        if size < self._offset:
            self._offset = 0
            yield LogChunk(b"", self.path, 0, f"{self.path} was truncated: reading it from the top", state, restarts)
        async for chunk in self._logs.drain(self.fd, self.path, self._offset, state, restarts):
            self._offset = chunk.offset + len(chunk.data)
            yield chunk

    async def _open(self, target: _Target, state: JobState, over: bool) -> list[str]:
        """(Re)open the target; keep the current descriptor when the path still names the same file."""
        try:
            fd = await open_as(self._owner, target.path, field=target.field, python=self._logs.reader_python)
        except FileMissing:
            if self.fd < 0 and not self._waiting_told and not over:
                self._waiting_told = True
                self.path = target.path
                return [f"waiting for {target.path} (job {state.value})"]
            return []
        dev, ino, size = await asyncio.to_thread(logfile.identity, fd)
        notices = [target.notice] if target.notice and self.fd < 0 else []
        if self.fd >= 0 and self._file == (dev, ino):
            os.close(fd)
            return notices
        if self.fd >= 0:
            notices.append(f"now reading {target.path} (another file than before)")
            os.close(self.fd)
            self._offset = 0
        elif self._first_open and self._tail:
            self._offset = await asyncio.to_thread(logfile.tail_offset, fd, size, self._tail)
        self._first_open = False
        self.fd, self.path, self._file = fd, target.path, (dev, ino)
        return notices
