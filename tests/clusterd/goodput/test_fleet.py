"""Fleet sums: wall-time weighted, per partition and user or per partition alone."""

from __future__ import annotations

from clusterd.goodput.accounting import PARTS, Goodput
from clusterd.goodput.fleet import summarize


def goodput(wall: float, productive: float) -> Goodput:
    parts = dict.fromkeys(PARTS, 0.0)
    parts.update(productive=productive, queue=wall - productive)
    return Goodput(wall, parts)


def test_rows_are_weighted_by_wall_time() -> None:
    jobs = [("gpu", "alice", goodput(100, 90)), ("gpu", "bob", goodput(900, 450)), ("cpu", "alice", goodput(10, 0))]
    rows = summarize(jobs)
    assert [(r.partition, r.user, r.jobs) for r in rows] == [
        ("cpu", "alice", 1),
        ("gpu", "alice", 1),
        ("gpu", "bob", 1),
    ]
    (cpu, gpu) = summarize(jobs, by_user=False)
    assert (gpu.partition, gpu.user, gpu.jobs, gpu.wall_seconds) == ("gpu", "", 2, 1000)
    assert gpu.ettr == 0.54 and cpu.ettr == 0.0
