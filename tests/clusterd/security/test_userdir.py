"""Reads below a directory a user opened: only through its descriptor, only the user's regular files."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterctl.storage.errors import AccessDeniedError, ObjectNotFoundError
from clusterd.security.userdir import UserDirStorage
from tests.support.privileges import needs_root

ME = frozenset({os.geteuid()})


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    root = tmp_path / "ckpt"
    (root / "commits").mkdir(parents=True)
    (root / "commits" / "000000000003.json").write_text('{"step": 3}')
    (root / "steps" / "000000000003").mkdir(parents=True)
    (root / "steps" / "000000000003" / "shard").write_bytes(b"0123456789")
    return root


@pytest.fixture
def store(ckpt: Path) -> Iterator[UserDirStorage]:
    s = UserDirStorage(os.open(ckpt, os.O_RDONLY | os.O_DIRECTORY), ME, f"file://{ckpt}")
    yield s
    s.close()


def test_reads_and_lists_the_users_own_files(store: UserDirStorage) -> None:
    assert store.get("commits/000000000003.json") == b'{"step": 3}'
    out = memoryview(bytearray(4))
    store.read_into("steps/000000000003/shard", out, offset=3)
    assert bytes(out) == b"3456" and store.stat("steps/000000000003/shard").size == 10
    assert [o.key for o in store.list_objects("")] == ["commits/000000000003.json", "steps/000000000003/shard"]
    assert [o.key for o in store.list_objects("commits/")] == ["commits/000000000003.json"]
    assert store.list_objects("nothing/") == []
    with pytest.raises(ObjectNotFoundError):
        store.get("commits/000000000004.json")
    with pytest.raises(AccessDeniedError, match="only reads"):
        store.put("commits/x", b"")


def test_links_and_fifos_below_the_root_are_refused_without_blocking(
    store: UserDirStorage, ckpt: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "000000000009.json").write_text("root's")
    (ckpt / "commits" / "000000000005.json").symlink_to(secret / "000000000009.json")
    (ckpt / "linked").symlink_to(secret, target_is_directory=True)
    os.mkfifo(ckpt / "commits" / "000000000007.json")
    with pytest.raises(AccessDeniedError, match="not a regular file"):
        store.get("commits/000000000005.json")
    with pytest.raises(AccessDeniedError, match="not a directory"):
        store.get("linked/000000000009.json")
    errors: list[BaseException] = []

    def read_fifo() -> None:
        try:
            store.get("commits/000000000007.json")
        except AccessDeniedError as exc:
            errors.append(exc)

    reader = threading.Thread(target=read_fifo, daemon=True)  # a FIFO: refused at once, no writer awaited
    reader.start()
    reader.join(5)
    assert not reader.is_alive() and "prw" in str(errors[0])
    assert "linked/000000000009.json" not in {o.key for o in store.list_objects("")}


def test_the_directory_opened_is_read_even_after_its_path_is_swapped(
    store: UserDirStorage, ckpt: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    (other / "commits").mkdir(parents=True)
    (other / "commits" / "000000000042.json").write_text("not this")
    ckpt.rename(tmp_path / "moved")
    ckpt.symlink_to(other, target_is_directory=True)
    assert [o.key for o in store.list_objects("commits/")] == ["commits/000000000003.json"]


@needs_root("gives a file to another user")
def test_another_users_file_is_refused(store: UserDirStorage, ckpt: Path) -> None:
    marker = ckpt / "commits" / "000000000003.json"
    os.chown(marker, 65534, 65534)
    with pytest.raises(AccessDeniedError, match="uid 65534"):
        store.get("commits/000000000003.json")
    os.chown(ckpt / "steps", 65534, 65534)
    assert [o.key for o in store.list_objects("")] == ["commits/000000000003.json"]  # not descended
