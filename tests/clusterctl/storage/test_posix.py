"""POSIX specifics: Lustre striping through ``lfs setstripe``, temp files, crash leftovers."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from clusterctl.storage import PosixOptions, PosixStorage
from clusterctl.storage.posix import TMP_MARK
from tests.support.prefixes import deep_tree, remove_tree


def fake_lfs(tmp_path: Path, rc: int = 0) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "lfs.log"
    script = bindir / "lfs"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit {rc}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return log


def test_lfs_setstripe_on_new_step_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_lfs(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    st = PosixStorage(str(tmp_path / "root"), PosixOptions(stripe_count=8, stripe_size=4 << 20))
    st.prepare_prefix("steps/000000000001/run/")
    st.prepare_prefix("steps/000000000001/run/")  # existing dir: not striped again
    lines = log.read_text().splitlines()
    assert lines == [f"setstripe -c 8 -S {4 << 20} {tmp_path / 'root' / 'steps' / '000000000001' / 'run'}"]
    st.close()


def test_lfs_failure_is_only_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake_lfs(tmp_path, rc=1)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    # Another test's logging set-up may have disabled or raised this logger: this one reads it.
    logger = logging.getLogger("clusterctl.storage.posix")
    monkeypatch.setattr(logger, "disabled", False)
    st = PosixStorage(str(tmp_path / "root"))
    with caplog.at_level(logging.WARNING, logger=logger.name):
        st.prepare_prefix("steps/x/")
    st.put("steps/x/a", b"1")
    assert "lfs setstripe" in caplog.text and st.get("steps/x/a") == b"1"
    st.close()


def test_no_lfs_means_plain_posix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    st = PosixStorage(str(tmp_path / "root"))
    st.prepare_prefix("steps/x/")
    assert (tmp_path / "root" / "steps" / "x").is_dir()
    st.close()


def test_crash_leftover_temp_files_are_incomplete_uploads(tmp_path: Path) -> None:
    st = PosixStorage(str(tmp_path))
    st.put("steps/1/a/shard", b"done")
    leftover = tmp_path / "steps" / "1" / "a" / f"other{TMP_MARK}deadbeef"
    leftover.write_bytes(b"partial")
    assert [o.key for o in st.list_objects("steps/")] == ["steps/1/a/shard"]
    [upload] = st.list_incomplete("steps/")
    assert upload.key == "steps/1/a/other"
    st.abort_incomplete(upload)
    assert not leftover.exists()
    st.close()


def test_delete_prunes_empty_dirs_not_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    st = PosixStorage(str(root))
    st.put("steps/1/a/x", b"1")
    st.delete(["steps/1/a/x"])
    assert root.is_dir() and not (root / "steps").exists()
    st.close()


def test_deep_tree_lists_without_recursion_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A 10,000-deep commits/ tree (hostile or broken) neither crashes nor stalls a listing."""
    root = tmp_path / "root"
    st = PosixStorage(str(root))
    st.put("commits/000000000001.json", b"{}")
    deep_tree(root / "commits", 10_000, leaf="deep.json")  # the path is far beyond PATH_MAX
    try:
        assert [o.key for o in st.list_objects("commits/")] == ["commits/000000000001.json"]
        assert "levels deep" in caplog.text
    finally:
        st.close()
        remove_tree(root / "commits" / "d")


def test_listing_and_io_never_follow_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s3cret")
    root = tmp_path / "root"
    st = PosixStorage(str(root))
    st.put("steps/1/a/x", b"1")
    (root / "steps" / "link").symlink_to(outside)
    (root / "steps" / "1" / "a" / "f").symlink_to(outside / "secret")
    assert [o.key for o in st.list_objects("steps/")] == ["steps/1/a/x"]
    from clusterctl.storage import InvalidKeyError

    for op in (
        lambda: st.get("steps/link/secret"),
        lambda: st.get("steps/1/a/f"),
        lambda: st.put("steps/link/new", b"x"),
        lambda: st.stat("steps/link/secret"),
        lambda: st.read_into("steps/1/a/f", memoryview(bytearray(1))),
    ):
        with pytest.raises(InvalidKeyError, match="symbolic link"):
            op()
    assert not (outside / "new").exists()
    st.close()
