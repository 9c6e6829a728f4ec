"""Mapping service users to Unix accounts, and their job directories."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from clusterd.errors import FailedPrecondition


@dataclass(frozen=True)
class UnixUser:
    name: str
    uid: int | None  # None when the service is not root: sbatch then runs as the service's own user
    gid: int | None
    home: str


def resolve_unix_user(name: str) -> UnixUser:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise FailedPrecondition(f"user {name!r} has no Unix account on this host") from None
    if os.geteuid() != 0:
        return UnixUser(name, None, None, entry.pw_dir)
    return UnixUser(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def job_dir(root: str, user: UnixUser) -> str:
    """``<job_root>/<user>``, created owned by the user, where outputs go by default."""
    path = Path(root) / user.name
    if not path.exists():
        path.mkdir(parents=True, mode=0o750)
        if user.uid is not None and user.gid is not None:
            os.chown(path, user.uid, user.gid)
    return str(path)
