"""A hostile checkpoint prefix costs only its own job, on the real stack.

One job's prefix is a POSIX directory whose ``commits/`` holds a 10,000-deep directory tree (which
made the old recursive walk raise RecursionError and stop the poller for everyone), another's holds
100,000 objects (which stalled every poll, listed inside the record lock). While both run, a third
job's state changes must still reach a watcher within the normal poll latency, and the poll itself
must stay as fast as ever.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.prefixes import deep_tree, many_markers, remove_tree
from tests.support.users import user_dir
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

DEPTH = 10_000
OBJECTS = 100_000
LAG_SLACK = 2.5  # seconds on top of the poll interval: Slurm's 1 s time resolution, the watch hop


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[Path, Path]]:
    with user_dir("alice", "hostile") as base:  # alice's own: the reader lists it with her rights
        deep, huge = base / "deep", base / "huge"
        deep_tree(deep / "commits", DEPTH)
        many_markers(huge / "commits", OBJECTS)
        subprocess.run(["chown", "-R", "alice:alice", str(base)], check=True)
        yield deep, huge
        remove_tree(base)  # shutil's (recursive) rmtree would not cope with the deep tree


def sleeper(name: str, seconds: int, uri: str = "") -> jobs_pb2.JobSpec:
    return jobs_pb2.JobSpec(name=name, command=["sleep", str(seconds)], checkpoint_uri=uri, time_limit="5")


def test_hostile_prefixes_do_not_slow_anyone_else(daemon: Daemon, hostile: tuple[Path, Path]) -> None:
    deep, huge = hostile
    client = daemon.client("alice")
    bad = [
        client.submit(sleeper("ckpt-deep", 120, f"file://{deep}")).job.job_id,
        client.submit(sleeper("ckpt-huge", 120, str(huge))).job.job_id,
    ]
    try:
        wait_for(
            lambda: all(client.get(j).state == jobs_pb2.JOB_STATE_RUNNING for j in bad),
            timeout=120,
            what="the hostile jobs to run",
        )
        time.sleep(3 * daemon.poll_interval)  # both followed by the progress reader by now
        before = daemon.metrics()

        seen: dict[int, float] = {}
        other = client.submit(sleeper("ckpt-other", 2)).job.job_id
        done = threading.Event()

        def watch() -> None:
            for event in daemon.client("alice").watch([other], include_initial=False):
                seen.setdefault(event.job.state, time.time())
                if event.job.terminal:
                    done.set()
                    return

        threading.Thread(target=watch, daemon=True).start()
        assert done.wait(120), daemon.tail()
        job = client.get(other)
        assert job.state == jobs_pb2.JOB_STATE_COMPLETED
        limit = daemon.poll_interval + LAG_SLACK
        running_lag = seen[jobs_pb2.JOB_STATE_RUNNING] - job.start_time.ToSeconds()
        finished_lag = seen[jobs_pb2.JOB_STATE_COMPLETED] - job.end_time.ToSeconds()
        assert running_lag <= limit and finished_lag <= limit, (running_lag, finished_lag)

        after = daemon.metrics()
        key = "clusterd_queue_poll_latency_seconds_{}{{}}"
        polls = after[key.format("count")] - before[key.format("count")]
        mean = (after[key.format("sum")] - before[key.format("sum")]) / polls
        assert polls >= 2 and mean < 0.5, (polls, mean)
        assert all(not client.get(j).terminal for j in bad)  # nothing else happened to them either

        records = daemon.log_records()
        assert not [r for r in records if "queue poll" in r.get("message", "")]  # never failed nor crashed
        huge_warnings = [r for r in records if "unknown" in r.get("message", "") and str(huge) in r["message"]]
        assert len(huge_warnings) == 1 and "more than" in huge_warnings[0]["message"]  # logged once
    finally:
        for job_id in bad:
            client.cancel(job_id)
