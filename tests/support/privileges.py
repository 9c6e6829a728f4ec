"""What a test needs that only root has: the fast loop (``pytest -m "not stack"``) runs without root.

clusterd runs as root and acts with each user's rights; a test of that (giving a file to another
user, opening or connecting as another uid) is skipped, saying why, when the tests run unprivileged.
"""

from __future__ import annotations

import os

import pytest

IS_ROOT = os.geteuid() == 0


def needs_root(why: str) -> pytest.MarkDecorator:
    """Skip unless the tests run as root: ``@needs_root("gives a file to another user")``."""
    return pytest.mark.skipif(not IS_ROOT, reason=f"{why}: needs root")
