"""slurmctld's load must not grow with the number of watchers: measured with sdiag."""

from __future__ import annotations

import threading
import time

import pytest

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack

pytestmark = pytest.mark.slurm

WINDOW = 12.0


def job_info_rpcs(stack: Stack) -> int:
    for line in stack.run("sdiag").stdout.splitlines():
        if "REQUEST_JOB_INFO " in line or "REQUEST_JOB_INFO\t" in line or line.strip().startswith("REQUEST_JOB_INFO "):
            return int(line.split("count:")[1].split()[0])
    return 0


def measure(stack: Stack) -> int:
    before = job_info_rpcs(stack)
    time.sleep(WINDOW)
    return job_info_rpcs(stack) - before


def test_hundred_watchers_do_not_add_queue_queries(daemon: Daemon, stack: Stack) -> None:
    idle = measure(stack)
    stop = threading.Event()
    opened = []
    clients = [daemon.client("alice") for _ in range(10)]

    def watcher(i: int) -> None:
        stream = clients[i % 10].jobs.WatchJobs(jobs_pb2.WatchJobsRequest(), metadata=clients[i % 10]._metadata())
        opened.append(stream)
        try:
            for _ in stream:
                if stop.is_set():
                    break
        except Exception:
            pass

    threads = [threading.Thread(target=watcher, args=(i,), daemon=True) for i in range(100)]
    for t in threads:
        t.start()
    time.sleep(2)
    with_watchers = measure(stack)
    stop.set()
    for s in opened:
        s.cancel()
    # The service polls once per second; other clients of slurmctld (the stack's own clusterd) are
    # the same in both windows, so the two counts differ only by timing jitter.
    assert with_watchers <= idle + 3, (idle, with_watchers)
    assert with_watchers <= WINDOW / daemon.poll_interval * 2 + 6
