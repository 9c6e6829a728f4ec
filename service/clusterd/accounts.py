"""The Unix accounts clusterd acts for, looked up once and shared by every part that needs one.

A submit needs its caller's account several times over: the manager checks that it exists and
settles the job's directories with its rights, and a Slurm backend runs sbatch as it, signs a token
for it or names it to libslurm; the log reader opens files as it. Where passwd and group come from
LDAP or sssd, each lookup may be a network round trip (``getgrouplist`` walks every group), so an
account, groups included, is kept for :data:`KEEP_SECONDS`, as nscd or sssd keep theirs: a removed
account or a changed group list shows within that time. A name with no account is never kept.

:func:`lookup` blocks on a miss (NSS): call it in a worker thread. :func:`cached` never blocks.
"""

from __future__ import annotations

import os
import pwd
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

KEEP_SECONDS = 60.0


@dataclass(frozen=True)
class UnixAccount:
    name: str
    uid: int
    gid: int
    home: str
    groups: tuple[int, ...]  # every group the account is in, its primary group included


class Accounts:
    """Accounts by name, each kept ``keep_seconds`` (thread-safe: lookups run in worker threads)."""

    def __init__(self, keep_seconds: float = KEEP_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._keep = keep_seconds
        self._clock = clock
        self._kept: dict[str, tuple[UnixAccount, float]] = {}
        self._lock = threading.Lock()

    def cached(self, name: str) -> UnixAccount | None:
        """The account while it is kept, else None; never blocks."""
        with self._lock:
            kept = self._kept.get(name)
        return kept[0] if kept is not None and self._clock() < kept[1] else None

    def lookup(self, name: str) -> UnixAccount:
        """The account named ``name``; KeyError when there is none. Blocking on a miss."""
        account = self.cached(name)
        if account is not None:
            return account
        entry = pwd.getpwnam(name)
        groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
        account = UnixAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir, groups)
        with self._lock:
            self._kept[name] = (account, self._clock() + self._keep)
        return account

    def forget(self) -> None:
        """Drop every kept account (tests; an operator's change that must show at once restarts clusterd)."""
        with self._lock:
            self._kept.clear()


ACCOUNTS = Accounts()  # the process's one table: what one caller looked up, the next one reuses
cached = ACCOUNTS.cached
lookup = ACCOUNTS.lookup
