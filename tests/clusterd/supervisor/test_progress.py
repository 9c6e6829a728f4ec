"""ProgressReader: budgets per job, failures contained per job, markers listed without a walk."""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterctl.storage import open_storage
from clusterctl.storage.errors import StorageError
from clusterd.errors import FailedPrecondition
from clusterd.security.userdir import UserDirStorage
from clusterd.supervisor.progress import (
    OverBudget,
    ProgressBudget,
    ProgressReader,
    Reading,
    list_steps,
    user_dir_steps,
)
from tests.support.prefixes import deep_tree, remove_tree
from tests.support.privileges import needs_root
from tests.support.s3server import get_server

FAR = 1e18  # a deadline that never comes


def markers(root: Path, *steps: int) -> Path:
    commits = root / "commits"
    commits.mkdir(parents=True, exist_ok=True)
    for step in steps:
        (commits / f"{step:012d}.json").write_text("{}")
    return root


def dir_steps(root: Path, max_keys: int, deadline: float) -> int:
    """What the reader lists once the job's user opened ``root`` (here: this test's own directory)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    return user_dir_steps(UserDirStorage(fd, frozenset({os.geteuid()}), str(root)), max_keys, deadline)


def test_newest_marker_wins_and_nothing_else_counts(tmp_path: Path) -> None:
    root = markers(tmp_path / "ckpt", 3, 12, 7)
    (root / "commits" / "000000000099.json.tmp-x").write_text("")  # a marker being written
    (root / "commits" / "000000000050.json").mkdir()  # a directory is not a marker
    (root / "steps" / "000000000100").mkdir(parents=True)  # data of an uncommitted step
    assert dir_steps(root, 100, FAR) == 12
    (tmp_path / "nocommits").mkdir()
    assert dir_steps(tmp_path / "nocommits", 100, FAR) == -1
    assert dir_steps(markers(tmp_path / "empty"), 100, FAR) == -1
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "commits").symlink_to(root / "commits")  # never followed
    with pytest.raises(StorageError, match="not a directory"):
        dir_steps(tmp_path / "linked", 100, FAR)
    with pytest.raises(FailedPrecondition, match="only S3"):
        list_steps(f"file://{root}", 100, FAR)


def test_a_huge_listing_is_cut_at_the_key_budget(tmp_path: Path) -> None:
    root = markers(tmp_path / "ckpt", *range(30))
    assert dir_steps(root, 30, FAR) == 29
    with pytest.raises(OverBudget, match="more than 29 entries"):
        dir_steps(root, 29, FAR)
    with pytest.raises(OverBudget, match="ran out of time"):
        dir_steps(markers(tmp_path / "big", *range(600)), 10_000, deadline=0.0)


def test_a_deep_tree_under_commits_is_never_walked(tmp_path: Path) -> None:
    root = markers(tmp_path / "ckpt", 4)
    deep_tree(root / "commits", 3 * 1000)  # deeper than Python's recursion limit; one scandir sees one entry
    try:
        assert dir_steps(root, 10, FAR) == 4
    finally:  # pytest's own (recursive) cleanup of old temp dirs would hit the recursion limit
        remove_tree(root / "commits" / "d")


@pytest.mark.s3
def test_s3_lists_one_delimited_level_within_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    server = get_server()
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{server.bucket}/progress-tests/{uuid.uuid4().hex}"
    storage = open_storage(uri)
    try:
        for key in (
            "commits/000000000002.json",
            "commits/000000000011.json",
            "commits/notes.txt",
            "commits/000000000099.json/nested",
            "steps/000000000500/a/rank-00000-of-00001.manifest.json",
        ):
            storage.put(key, b"{}")
    finally:
        storage.close()
    assert list_steps(uri, 100, FAR) == 11  # nested keys and steps/ are not markers (nor listed)
    with pytest.raises(OverBudget, match="more than 3 keys"):
        list_steps(uri, 3, FAR)
    assert list_steps(f"{uri}-missing", 100, FAR) == -1


class Lister:
    """A fake store per URI: a step, an exception, or a read that blocks until released."""

    def __init__(self) -> None:
        self.answers: dict[str, object] = {}
        self.release = threading.Event()
        self.calls: list[str] = []

    def __call__(self, uri: str, max_keys: int, deadline: float) -> int:
        self.calls.append(uri)
        answer = self.answers[uri]
        if answer == "hang":
            self.release.wait(30)
            return 1
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, int)
        return answer


@pytest.fixture
def lister() -> Iterator[Lister]:
    fake = Lister()
    yield fake
    fake.release.set()


async def test_a_slow_or_failing_store_costs_only_its_own_job(lister: Lister, caplog: pytest.LogCaptureFixture) -> None:
    reader = ProgressReader(ProgressBudget(seconds=0.2, interval=60, retry_after=60, workers=4), lister=lister)
    lister.answers = {
        "s3://b/hang": "hang",
        "s3://b/deep": RecursionError("maximum recursion depth exceeded"),
        "s3://b/huge": OverBudget("more than 10000 keys"),
        "s3://b/good": 42,
    }
    for key, uri in enumerate(lister.answers):
        reader.follow(key, uri)
    with caplog.at_level(logging.WARNING, "clusterd.supervisor.progress"):
        await reader.read_due()
    assert reader.reading(3).step == 42 and reader.reading(3).error == ""
    for key, why in ((0, "no answer within 0.2 s"), (1, "RecursionError"), (2, "more than 10000 keys")):
        reading = reader.reading(key)
        assert reading.step is None and why in reading.error
    assert len(caplog.records) == 3  # one line per failing job

    # Retried only after retry_after, and logged once per bad spell.
    await reader.read_due()
    assert len(lister.calls) == 4
    for key in (1, 2):
        reader.refresh(key)
    caplog.clear()
    with caplog.at_level(logging.WARNING, "clusterd.supervisor.progress"):
        await reader.read_due()
    assert len(lister.calls) == 6 and not caplog.records


async def test_a_hung_read_keeps_its_worker_and_its_job_waits(lister: Lister) -> None:
    reader = ProgressReader(ProgressBudget(seconds=0.05, interval=0, retry_after=0, workers=2), lister=lister)
    lister.answers = {"s3://b/a": "hang", "s3://b/b": 5}
    reader.follow(0, "s3://b/a")
    reader.follow(1, "s3://b/b")
    await reader.read_due()
    assert reader.reading(0).error and reader.reading(1).step == 5
    await reader.read_due()  # job 0's thread still runs: no second read of it piles up
    assert lister.calls.count("s3://b/a") == 1 and lister.calls.count("s3://b/b") == 2
    lister.release.set()
    for _ in range(500):
        await asyncio.sleep(0.01)
        if lister.calls.count("s3://b/a") == 1 and not reader._jobs[0].in_flight:
            break
    await reader.read_due()
    assert reader.reading(0).step == 1 and reader.reading(0).error == ""


async def test_follow_forget_and_refresh(lister: Lister) -> None:
    reader = ProgressReader(ProgressBudget(interval=3600), lister=lister)
    lister.answers = {"s3://b/x": 3, "s3://b/y": 9}
    assert reader.reading(0).step is None and reader.reading(0).read_at == 0
    reader.follow(0, "s3://b/x")
    before = time.time()
    await reader.read_due()
    assert reader.reading(0).step == 3 and reader.reading(0).read_at >= before
    reader.follow(0, "s3://b/x")  # following again changes nothing
    await reader.read_due()
    assert lister.calls == ["s3://b/x"]
    lister.answers["s3://b/x"] = 4
    reader.refresh(0)
    await reader.read_due()
    assert reader.reading(0).step == 4
    reader.follow(0, "s3://b/y")  # a new URI starts over
    assert reader.reading(0).step is None
    reader.forget(0)
    await reader.read_due()
    assert lister.calls == ["s3://b/x", "s3://b/x"] and reader.reading(0).read_at == 0
    reader.close()


async def test_run_reads_in_the_background_until_stopped(lister: Lister) -> None:
    reader = ProgressReader(ProgressBudget(interval=3600), lister=lister)
    lister.answers = {"s3://b/x": 8}
    stop = asyncio.Event()
    task = asyncio.create_task(reader.run(stop))
    reader.follow(0, "s3://b/x")
    for _ in range(500):
        await asyncio.sleep(0.01)
        if reader.reading(0).step == 8:
            break
    stop.set()
    await task
    reader.close()
    assert reader.reading(0).step == 8


async def test_reads_past_the_worker_cap_wait_unstarted_instead_of_timing_out(lister: Lister) -> None:
    reader = ProgressReader(ProgressBudget(seconds=0.05, interval=0, retry_after=60, workers=1), lister=lister)
    lister.answers = {"s3://b/a": "hang", "s3://b/b": 5}
    reader.follow(0, "s3://b/a")
    reader.follow(1, "s3://b/b")
    await reader.read_due()
    assert reader.reading(0).error  # the hung read used its budget ...
    assert lister.calls == ["s3://b/a"] and reader.reading(1) == Reading()  # ... b never queued behind it
    lister.release.set()
    for _ in range(500):
        await asyncio.sleep(0.01)
        if not reader._jobs[0].in_flight:
            break
    await reader.read_due()
    assert reader.reading(1).step == 5 and reader.reading(1).error == ""
    reader.close()


@needs_root("reads as another user, as clusterd does")
async def test_a_file_prefix_is_read_with_the_jobs_users_rights(tmp_path: Path) -> None:
    """A job pointed at root's directory learns nothing of it; its own directory is read as before."""
    nobody = pwd.getpwnam("nobody")
    own = Path(tempfile.mkdtemp(prefix="progress-", dir="/tmp"))  # /tmp: a path nobody can walk
    try:
        markers(own, 5)
        for path in (own, own / "commits", own / "commits" / "000000000005.json"):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        secret = markers(tmp_path / "root-only", 9)  # under root's 0700 pytest directory
        reader = ProgressReader(ProgressBudget(interval=3600, retry_after=3600))
        reader.follow(0, f"file://{own}", user="nobody")
        reader.follow(1, f"file://{secret}", user="nobody")
        reader.follow(2, f"file://{secret}")  # no user known: not read at all
        await reader.read_due()
        assert reader.reading(0).step == 5 and reader.reading(0).error == ""
        assert reader.reading(1).step is None and "permission denied for nobody" in reader.reading(1).error
        assert reader.reading(2).step is None and "user is not known" in reader.reading(2).error
        reader.follow(1, f"file://{secret}")  # a later follow without the user keeps the one known
        assert reader._jobs[1].user == "nobody"
        reader.close()
    finally:
        shutil.rmtree(own)
