"""Mapping service users to Unix accounts, their job directories, and what they may reach.

Every function here blocks (passwd/group lookups, the filesystem): callers run them in a worker
thread, never on the event loop.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from clusterd import accounts
from clusterd.errors import FailedPrecondition


@dataclass(frozen=True)
class UnixUser:
    name: str
    uid: int | None  # None when the service is not root: sbatch then runs as the service's own user
    gid: int | None
    home: str
    groups: tuple[int, ...] = ()


def resolve_unix_user(name: str) -> UnixUser:
    """``name``'s account (clusterd.accounts: kept a minute); FailedPrecondition when it has none."""
    try:
        return _unix_user(accounts.lookup(name))
    except KeyError:
        raise FailedPrecondition(f"user {name!r} has no Unix account on this host") from None


def _unix_user(account: accounts.UnixAccount) -> UnixUser:
    if os.geteuid() != 0:
        return UnixUser(account.name, None, None, account.home)
    return UnixUser(account.name, account.uid, account.gid, account.home, account.groups)


def job_dir(root: str, user: UnixUser) -> str:
    """``<job_root>/<user>``, created owned by the user: the working directory when none is given."""
    path = Path(root) / user.name
    if not path.exists():
        try:
            path.mkdir(parents=True, mode=0o750)
        except FileExistsError:  # a concurrent submit of the same user made it
            return str(path)
        if user.uid is not None and user.gid is not None:
            os.chown(path, user.uid, user.gid)
    return str(path)


def _may(st: os.stat_result, user: UnixUser, bits: int) -> bool:
    """Whether ``user`` has ``bits`` (a combination of r=4, w=2, x=1) on a file, by its mode."""
    if user.uid is None or user.uid == 0:
        return True
    if st.st_uid == user.uid:
        mode = (st.st_mode >> 6) & 7
    elif st.st_gid in user.groups or st.st_gid == user.gid:
        mode = (st.st_mode >> 3) & 7
    else:
        mode = st.st_mode & 7
    return mode & bits == bits


def directory_problem(path: str, user: UnixUser) -> str | None:
    """Why ``user`` cannot work in directory ``path`` (missing, not a directory, not searchable
    along the way), or None. Checked with the user's rights, as sbatch running as them would."""
    current = Path("/")
    for part in Path(path).parts[1:]:
        current = current / part
        try:
            st = os.stat(current)
        except FileNotFoundError:
            return f"{path}: no such directory"
        except OSError as exc:
            return f"{path}: {exc.strerror}"
        if not stat.S_ISDIR(st.st_mode):
            return f"{path}: {current} is not a directory"
        if not _may(st, user, 1):
            return f"{path}: permission denied for {user.name} at {current}"
    return None
