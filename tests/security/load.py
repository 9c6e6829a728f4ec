"""A load driver: N synchronous clients submitting, watching and cancelling until a deadline.

Each client thread loops submit -> get -> (every 4th round: open a watch, read its snapshot) -> cancel.
Every call's outcome is counted by status code; the job ids the service handed out are kept so the
caller can reconcile them against the store and against Slurm.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from clusterctl.client import ClusterClient
from clusterctl.errors import ServiceError
from clusterctl.v1 import jobs_pb2


@dataclass
class LoadReport:
    calls: Counter[str] = field(default_factory=Counter)  # "Method:CODE" -> count
    job_ids: list[str] = field(default_factory=list)  # every job id SubmitJob returned (non-duplicate)
    duplicates: int = 0
    seconds: float = 0.0

    def unexpected(self) -> dict[str, int]:
        return {k: v for k, v in self.calls.items() if not k.endswith((":OK", ":RESOURCE_EXHAUSTED"))}


def run_load(
    addr: str,
    tokens: list[str],
    *,
    clients: int = 50,
    seconds: float = 60.0,
    command: tuple[str, ...] = ("sleep", "30"),
) -> LoadReport:
    report = LoadReport()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    seq = itertools.count()

    def count(name: str, code: str) -> None:
        with lock:
            report.calls[f"{name}:{code}"] += 1

    def call(name: str, fn, *args):  # type: ignore[no-untyped-def]
        try:
            out = fn(*args)
        except ServiceError as exc:
            count(name, exc.code_name)
            if exc.code_name == "RESOURCE_EXHAUSTED":
                time.sleep(0.05)
            return None
        count(name, "OK")
        return out

    def worker(i: int) -> None:
        with ClusterClient(addr, tokens[i % len(tokens)], timeout=30) as c:
            rounds = 0
            while time.monotonic() < deadline:
                rounds += 1
                spec = jobs_pb2.JobSpec(
                    command=list(command), name=f"load-{i}", request_id=f"load-{i}-{next(seq)}-{time.time_ns()}"
                )
                resp = call("SubmitJob", c.submit, spec)
                if resp is None:
                    continue
                with lock:
                    if resp.duplicate:
                        report.duplicates += 1
                    else:
                        report.job_ids.append(resp.job.job_id)
                job_id = resp.job.job_id
                call("GetJob", c.get, job_id)
                if rounds % 4 == 0:
                    call("WatchJobs", first_event, c, job_id)
                call("CancelJob", c.cancel, job_id)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    report.seconds = time.monotonic() - started
    return report


def first_event(client: ClusterClient, job_id: str) -> jobs_pb2.JobEvent | None:
    """Open a watch on one job, take its snapshot event, and close the stream."""
    stream = client.watch([job_id], include_initial=True)
    try:
        return next(stream, None)
    finally:
        stream.close()


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
