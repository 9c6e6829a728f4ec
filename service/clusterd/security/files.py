"""State on disk is the service's alone: a 0700 state directory, files created under umask 077.

The store holds every user's scripts and ``--env`` values, the audit log who did what: a reader
other than clusterd learns other users' secrets. The directory is what protects them (its files
cannot be reached through a 0700 directory whatever their own mode), and the files are created
0600 as well, so that copying the directory elsewhere does not widen them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from clusterd.config import ConfigError

log = logging.getLogger(__name__)

PRIVATE_DIR_MODE = 0o700


def refuse_shared_dir(path: Path, st: os.stat_result, what: str) -> None:
    """Refuse a directory others may write into (``/tmp``, ``/var/tmp``, a group's scratch space).

    Such a directory is everybody's: re-moding it to keep others out of clusterd's files would take
    it away from every other user on the host, and leaving it shared would let them plant or
    replace clusterd's files.

    Raises:
        ConfigError: ``path`` is writable by others or has the sticky bit.
    """
    if st.st_mode & (stat.S_IWOTH | stat.S_ISVTX):
        raise ConfigError(
            f"{what} {path} is a shared directory (mode {stat.S_IMODE(st.st_mode):o}): other users "
            "write there; give clusterd a directory of its own below it"
        )


def private_dir(path: Path) -> None:
    """Create ``path`` 0700, or tighten an existing directory of ours to 0700.

    Raises:
        ConfigError: ``path`` is not a directory or belongs to another user (who could read or
            replace the store), or cannot be created.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=PRIVATE_DIR_MODE)
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"state_dir {path} is not a directory (a symlink?)")
        if st.st_uid != os.geteuid():
            raise ConfigError(f"state_dir {path} belongs to uid {st.st_uid}, not clusterd's (uid {os.geteuid()})")
        refuse_shared_dir(path, st, "state_dir")
        if stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
            log.warning("state_dir %s was mode %o: tightened to 700", path, stat.S_IMODE(st.st_mode))
            os.chmod(path, PRIVATE_DIR_MODE)
    except OSError as exc:
        raise ConfigError(f"cannot prepare state_dir {path}: {exc.strerror or exc}") from exc


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Create files 0600 (SQLite gives its -wal/-shm files the database's mode) while opening the state.

    The umask is process-wide, so this wraps only start-up, before any worker thread exists; it is
    not set for the whole process because Slurm hands the submitter's umask on to every job.
    """
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)
