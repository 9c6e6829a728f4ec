"""Hostile checkpoint prefixes on local disk: what the listing and progress tests and bench/poll.py build.

A 10,000-deep tree is made relative to directory fds, so no path ever exceeds PATH_MAX, and removed
with ``rm -rf`` (fts copes with any depth; Python's and pytest's recursive cleanups do not).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def deep_tree(under: Path, depth: int, leaf: str = "") -> None:
    """``under/d/d/...`` ``depth`` levels deep (``under`` made if missing), with file ``leaf`` at the bottom."""
    under.mkdir(parents=True, exist_ok=True)
    fd = os.open(under, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
            os.close(parent)
        if leaf:
            os.close(os.open(leaf, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def many_markers(commits: Path, count: int) -> None:
    """``count`` empty commit markers (``<step:012d>.json``) in ``commits`` (made if missing)."""
    commits.mkdir(parents=True, exist_ok=True)
    for step in range(count):
        os.close(os.open(commits / f"{step:012d}.json", os.O_CREAT | os.O_WRONLY, 0o644))


def remove_tree(path: Path) -> None:
    subprocess.run(["rm", "-rf", str(path)], check=True)
