"""Directories of the stack's job users: where a user's shell would stand when they submit.

Jobs run as the caller (sbatch under the caller's uid), so a submit directory, `-D` or an output
path has to be one that user can write, exactly as under sbatch: pytest's root-only tmp dirs are not.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def user_dir(user: str, prefix: str = "test") -> Iterator[Path]:
    """A fresh directory owned by ``user`` under their home, removed afterwards."""
    entry = pwd.getpwnam(user)
    path = Path(entry.pw_dir) / f"{prefix}-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o755)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
