"""A shared directory (``/tmp``-like) is refused for clusterd's socket and state, never re-moded."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from clusterd.config import ConfigError
from clusterd.security.files import private_dir
from clusterd.security.unixsock import prepare_socket_dir


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A directory like /tmp: writable by everybody, sticky."""
    path = tmp_path / "scratch"
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


def test_a_socket_in_a_shared_directory_is_refused_and_the_directory_keeps_its_mode(shared: Path) -> None:
    with pytest.raises(ConfigError, match="shared directory"):
        prepare_socket_dir(str(shared / "clusterd.sock"), "")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777


def test_a_world_writable_state_dir_is_refused_and_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.mkdir()
    os.chmod(path, 0o777)
    with pytest.raises(ConfigError, match=r"state_dir .* shared directory"):
        private_dir(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o777


def test_a_directory_of_its_own_below_a_shared_one_is_made_private(shared: Path) -> None:
    plan = prepare_socket_dir(str(shared / "clusterd" / "clusterd.sock"), "")
    assert stat.S_IMODE(plan.path.parent.stat().st_mode) == 0o700
    private_dir(shared / "state")
    assert stat.S_IMODE((shared / "state").stat().st_mode) == 0o700
