"""sacct --json, both shapes (clusterd.slurm.accounting).

No capture from a real slurmdbd exists here (the local stack runs without accounting), so these
records follow the field names of Slurm's documented job schemas: dbv0.0.38 (22.05) and the
data_parser v0.0.40+ shapes; the real-stack test covers the "no accounting" answer.
"""

from __future__ import annotations

import json

import pytest

from clusterd.slurm.accounting import parse_sacct
from clusterd.slurm.parse import SlurmParseError
from clusterd.slurm.types import JobState

V38 = {
    "jobs": [
        {
            "job_id": 11,
            "name": "train",
            "user": "alice",
            "partition": "debug",
            "nodes": "node[1-2]",
            "state": {"current": "COMPLETED", "reason": "None"},
            "exit_code": {"status": "SUCCESS", "return_code": 0},
            "time": {"elapsed": 30, "start": 1700000000, "end": 1700000030, "submission": 1699999990},
            "array": {"job_id": 0, "task_id": None},
        },
        {
            "job_id": 12,
            "name": "crash",
            "user": "bob",
            "partition": "debug",
            "nodes": "node3",
            "state": {"current": "FAILED", "reason": "NonZeroExitCode"},
            "exit_code": {"status": "SIGNALED", "return_code": 0, "signal": {"signal_id": 9, "name": "KILL"}},
            "time": {"elapsed": 5, "start": 1700000100, "end": 1700000105, "submission": 1700000090},
        },
        {
            "job_id": 13,
            "name": "still",
            "user": "alice",
            "nodes": "node4",
            "state": {"current": "RUNNING"},
            "time": {"start": 1700000200, "end": 0},
        },
    ]
}

V40 = {
    "jobs": [
        {
            "job_id": 21,
            "name": "sweep",
            "user": "alice",
            "partition": "debug",
            "nodes": "node5",
            "state": {"current": ["TIMEOUT"], "reason": "None"},
            "exit_code": {
                "status": ["SUCCESS"],
                "return_code": {"set": True, "infinite": False, "number": 0},
                "signal": {"id": {"set": True, "infinite": False, "number": 15}, "name": "TERM"},
            },
            "time": {"elapsed": 60, "start": 1700001000, "end": 1700001060, "submission": 1700000999},
            "array": {"job_id": 20, "task_id": {"set": True, "infinite": False, "number": 3}},
        },
    ]
}


def test_22_05_shape() -> None:
    jobs = parse_sacct(json.dumps(V38))
    assert [j.job_id for j in jobs] == ["11", "12"]  # the running one is not history
    done, failed = jobs
    assert done.state is JobState.COMPLETED and done.nodes == ("node1", "node2") and done.end_time == 1700000030
    assert (failed.state, failed.exit_signal, failed.user) == (JobState.FAILED, 9, "bob")


def test_data_parser_shape() -> None:
    (job,) = parse_sacct(json.dumps(V40))
    assert job.state is JobState.TIMEOUT and job.exit_signal == 15
    assert (job.array_job_id, job.array_task_id, job.display_id) == ("20", 3, "20_3")


@pytest.mark.parametrize("text", ["not json", "[]", '{"jobs": 3}', '{"jobs": [{"name": "x"}]}', '{"jobs": [3]}'])
def test_malformed_answers_are_parse_errors(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_sacct(text)
