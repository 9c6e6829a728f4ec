"""Opening a path with a user's rights from root: the kernel checks the user, fstat checks the rest."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterd.accounts import lookup
from clusterd.errors import FailedPrecondition, PermissionDenied
from clusterd.security.useropen import open_as
from tests.support.privileges import needs_root

pytestmark = needs_root("opens as another user, as clusterd does")


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="useropen-", dir="/tmp"))
    os.chown(path, 65534, 65534)
    yield path
    shutil.rmtree(path)


async def test_links_fifos_and_other_owners_are_refused_at_once(nobody_dir: Path, tmp_path: Path) -> None:
    nobody = lookup("nobody")
    mine = nobody_dir / "out.log"
    mine.write_text("hello\n")
    os.chown(mine, 65534, 65534)
    fd = await open_as(nobody, str(mine), field="stdout_path")
    assert os.read(fd, 100) == b"hello\n"
    os.close(fd)
    (nobody_dir / "root.log").symlink_to(tmp_path)  # root's 0700 directory: the kernel says no
    with pytest.raises(PermissionDenied, match="permission denied for nobody"):
        await open_as(nobody, str(nobody_dir / "root.log"), field="stdout_path")
    (nobody_dir / "passwd").symlink_to("/etc/passwd")  # readable, but not nobody's
    with pytest.raises(PermissionDenied, match="belongs to uid 0"):
        await open_as(nobody, str(nobody_dir / "passwd"), field="stdout_path")
    os.mkfifo(nobody_dir / "fifo")
    os.chown(nobody_dir / "fifo", 65534, 65534)
    with pytest.raises(FailedPrecondition, match="not a regular file"):  # no writer is waited for
        await asyncio.wait_for(open_as(nobody, str(nobody_dir / "fifo"), field="stdout_path"), 5)


async def test_a_helper_that_cannot_start_says_why(nobody_dir: Path) -> None:
    with pytest.raises(FailedPrecondition, match="failed to execute /nonexistent/python"):
        await open_as(lookup("nobody"), str(nobody_dir), field="x", python="/nonexistent/python", directory=True)
