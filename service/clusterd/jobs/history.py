"""``history``: finished jobs from the service's records and, where the cluster has it, Slurm accounting.

The store knows every job submitted (or adopted) through the service, with its restarts, until
retention prunes it; slurmdbd knows every job Slurm ran, plain sbatch ones included, but nothing
of the service's restarts. A job both know is shown once, from the store. Accounting is optional:
without slurmdbd (``AccountingStorageType=none``, as on the local stack) sacct refuses, which is
remembered for a while so history does not run a failing command on every call.
"""

from __future__ import annotations

import fnmatch
import logging
import time
from dataclasses import dataclass

from clusterd.auth.identity import Identity
from clusterd.config import LimitsConfig, ViewsConfig
from clusterd.errors import InvalidArgument, PermissionDenied, SlurmError
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.types import JobState, SlurmJob
from clusterd.store.jobs import JobRecords
from clusterd.store.records import JobRecord

log = logging.getLogger(__name__)

_NO_ACCOUNTING_RECHECK = 300.0  # seconds before asking sacct again after "accounting storage is disabled"
_MAX_NAME = 256


@dataclass(frozen=True)
class HistoryQuery:
    user: str = ""  # "" = the caller; "*" = everyone (admins); a name (admins, or the caller's own)
    states: frozenset[JobState] = frozenset()
    name: str = ""
    since: float | None = None
    until: float | None = None
    limit: int = 0


@dataclass(frozen=True)
class Finished:
    """One finished job: from the store (``record``) or from accounting alone (``accounted``)."""

    end: float
    record: JobRecord | None = None
    accounted: SlurmJob | None = None


@dataclass(frozen=True)
class HistoryResult:
    jobs: list[Finished]
    accounting: bool
    note: str


def _check_name(name: str) -> str:
    if len(name) > _MAX_NAME or any(ord(c) < 32 for c in name):
        raise InvalidArgument("name", f"must be one line of at most {_MAX_NAME} characters")
    return name


class History:
    def __init__(self, store: JobRecords, backend: SlurmBackend, views: ViewsConfig, limits: LimitsConfig) -> None:
        self._store = store
        self._backend = backend
        self._views = views
        self._limits = limits
        self._no_accounting_until = 0.0

    async def find(self, ident: Identity, query: HistoryQuery, *, now: float | None = None) -> HistoryResult:
        """Finished jobs in the query's window, newest end first. Raises InvalidArgument, PermissionDenied."""
        if query.user and query.user != ident.user and not ident.admin:
            raise PermissionDenied("only admins may see other users' history")
        now = time.time() if now is None else now
        until = query.until if query.until is not None else now + 1
        since = query.since if query.since is not None else until - self._views.history_default_days * 86400
        if since >= until:
            raise InvalidArgument("since", "must be before until")
        name = _check_name(query.name)
        limit = min(query.limit or self._limits.list_default_limit, self._limits.list_default_limit)
        who: str | None = ident.user if not query.user else (None if query.user == "*" else query.user)
        records = await self._store.finished(
            user=who, since=since, until=until, limit=limit, states=query.states, name_glob=name
        )
        rows = [Finished(r.end_time or r.start_time or r.created, record=r) for r in records]
        accounted, used, note = await self._accounting(who, since, until)
        known = {(r.job_id, r.user) for r in records}
        for job in accounted:
            job_id = f"{job.array_job_id}_{job.array_task_id}" if job.in_array else job.job_id
            if (job_id, job.user) in known or (job.job_id, job.user) in known:
                continue
            if job.end_time is None or not since <= job.end_time < until:
                continue
            if query.states and job.state not in query.states:
                continue
            if name and not fnmatch.fnmatchcase(job.name, name):
                continue
            rows.append(Finished(job.end_time or 0.0, accounted=job))
        rows.sort(key=lambda f: f.end, reverse=True)
        return HistoryResult(rows[:limit], used, note)

    async def _accounting(self, user: str | None, since: float, until: float) -> tuple[list[SlurmJob], bool, str]:
        """(jobs, consulted, note): accounting's finished jobs, or why there are none."""
        if self._views.accounting == "off":
            return [], False, "Slurm accounting is off (views.accounting)"
        if time.monotonic() < self._no_accounting_until:
            return [], False, "Slurm accounting is not configured (no slurmdbd)"
        try:
            jobs = await self._backend.accounting_jobs(since=since, until=until, user=user)
        except SlurmError as exc:
            log.info("history without Slurm accounting: %s", exc)
            return [], False, f"Slurm accounting unavailable: {exc}"
        if jobs is None:
            self._no_accounting_until = time.monotonic() + _NO_ACCOUNTING_RECHECK
            return [], False, "Slurm accounting is not configured (no slurmdbd)"
        return jobs, True, ""
