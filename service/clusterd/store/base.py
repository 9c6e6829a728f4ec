"""The job store seam: what the service asks of its database, whichever one it is.

Two implementations keep the same semantics: SqliteJobStore (embedded, one replica) and
PostgresJobStore (several replicas share it). The service annotates with :class:`JobStore` and only
store/factory.py names a concrete class.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

from clusterd.model.spec import JobSpec
from clusterd.slurm.types import JobState
from clusterd.store.bounds import UserBounds
from clusterd.store.records import EventRow, JobRecord, Lease, LiveRow, LoggedEvent, RestartEntry


class RecordLock(Protocol):
    """Held across one record's read-modify-write (an asyncio.Lock satisfies it)."""

    def locked(self) -> bool:
        """Whether this process holds it now (the reconciler skips a record an RPC holds)."""
        ...

    async def __aenter__(self) -> object: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> object: ...


class JobStore(Protocol):
    """Job records, their restarts, the event log and leases; every method is safe across replicas."""

    async def open(self) -> None:
        """Connect and migrate (a no-op where the constructor did it); call once before anything else."""
        ...

    async def close(self) -> None: ...

    def record_lock(self, record_id: int) -> RecordLock:
        """Serializes read-modify-write of one record between the reconciler and RPC handlers."""
        ...

    async def reserve(
        self, user: str, request_id: str, spec: JobSpec, *, tasks: int = 1, limits: UserBounds | None = None
    ) -> tuple[JobRecord, bool]:
        """Create a SUBMITTING record, or return the live one holding ``(user, request_id)``.

        Returns (record, created); only created=True may run sbatch. ``limits`` are admitted in the
        same transaction (finished records pruned oldest first; ResourceExhausted when live work
        alone passes a bound). A retry of a held request_id is returned whatever the bounds.
        """
        ...

    async def save(self, rec: JobRecord) -> None:
        """Write ``rec``; a superseded record is frozen, and giving ``rec`` a Slurm id another
        current record holds supersedes that one. Assigning a Slurm id commits durably."""
        ...

    def save_behind(self, rec: JobRecord) -> asyncio.Future[None] | None:
        """Queue :meth:`save` of ``rec`` so that every read and write asked of this store after the
        call, from any task, sees it, and return its outcome; None where the store cannot promise
        that order (the caller awaits :meth:`save` instead). Lets a submit answer before its commit."""
        ...

    async def record_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        """Append a restart and save the record with it, atomically (also appended to ``rec``)."""
        ...

    async def amend_last_restart(self, rec: JobRecord, entry: RestartEntry) -> None:
        """Replace ``rec``'s newest restart with ``entry``."""
        ...

    async def get_by_record(self, record_id: int) -> JobRecord | None: ...

    async def get_by_job_id(self, job_id: str, *, user: str | None = None, with_spec: bool = True) -> JobRecord | None:
        """The record Slurm id ``job_id`` names now (the current one), else the newest that held it."""
        ...

    async def live(self) -> builtins.list[LiveRow]:
        """The records the reconciler must still follow (not terminal, not failed), undecoded."""
        ...

    async def finished(
        self,
        *,
        user: str | None,
        since: float,
        until: float,
        limit: int,
        states: frozenset[JobState] = frozenset(),
        name_glob: str = "",
    ) -> builtins.list[JobRecord]:
        """Submitted records that finished in [since, until), newest end first, compact.

        ``name_glob``: ``*``, ``?``, ``[...]`` (``[^...]`` negates), case-sensitive, as SQLite's GLOB.
        """
        ...

    async def list(
        self, *, user: str | None, include_finished: bool, limit: int, states: frozenset[JobState] = frozenset()
    ) -> builtins.list[JobRecord]:
        """Submitted records, newest first, compact (``spec`` left empty)."""
        ...

    async def prune_finished(self, *, older_than: float, keep_per_user: int) -> int:
        """Delete finished records older than ``older_than`` or past each user's newest ``keep_per_user``."""
        ...

    # -- event log ----------------------------------------------------------------------------

    async def append_events(self, events: Sequence[EventRow]) -> builtins.list[int]:
        """Append in one transaction; returns their seqs. Seqs increase in COMMIT order: a reader
        that has seen seq N never later finds a newly committed seq below N."""
        ...

    async def events_after(self, seq: int, *, limit: int = 1000) -> builtins.list[LoggedEvent]:
        """Events with seq > ``seq``, ordered by seq, at most ``limit``."""
        ...

    async def event_bounds(self) -> tuple[int, int]:
        """(oldest seq kept, newest seq); (0, 0) when the log is empty."""
        ...

    async def prune_events(self, *, older_than: float) -> int:
        """Delete events whose time is before ``older_than``; returns how many went."""
        ...

    # -- leases (times by the database's clock) -------------------------------------------------

    async def acquire_lease(self, name: str, holder: str, ttl: float) -> Lease | None:
        """Take or keep the lease atomically; None while another holder's lease is live.

        The epoch is bumped on every new acquisition (absent, expired, or another holder's) and
        kept when ``holder`` still held it.
        """
        ...

    async def renew_lease(self, name: str, holder: str, epoch: int, ttl: float) -> bool:
        """Extend it only while ``holder`` AND ``epoch`` match and it has not expired."""
        ...

    async def current_lease(self, name: str) -> Lease | None: ...

    async def release_lease(self, name: str, holder: str, epoch: int) -> None:
        """Expire it now (clean shutdown), if still ``holder``'s at ``epoch``."""
        ...
