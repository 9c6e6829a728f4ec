"""Slurm's filename patterns filled for one job or array task (clusterd.jobs.outputs)."""

from __future__ import annotations

import time

import pytest

from clusterd.errors import FailedPrecondition
from clusterd.jobs.outputs import MAX_EXPANDED, MAX_WIDTH, OutputJob, expand, width

JOB = OutputJob(job_id="42", array_id="42", name="train", user="alice", first_node="node3")
TASK = OutputJob(job_id="57", array_id="42", task_id=13, name="sweep", user="alice")


@pytest.mark.parametrize(
    ("pattern", "job", "path"),
    [
        ("/h/slurm-%j.out", JOB, "/h/slurm-42.out"),
        ("/h/%x-%u-%A.out", JOB, "/h/train-alice-42.out"),
        ("/h/%N.%n.%t.log", JOB, "/h/node3.0.0.log"),
        ("/h/100%%-%6j", JOB, "/h/100%-000042"),
        ("/h/slurm-%A_%a.out", TASK, "/h/slurm-42_13.out"),
        ("/h/%j-%3a-%b", TASK, "/h/57-013-3"),
    ],
)
def test_patterns_fill_as_sbatch_documents(pattern: str, job: OutputJob, path: str) -> None:
    assert expand(pattern, job, field="stdout_path") == path


@pytest.mark.parametrize(
    ("pattern", "job", "says"),
    [
        ("/h/%N.out", OutputJob(job_id="1"), "has not started"),  # a pending job has no node yet
        ("/h/%a.out", JOB, "name one array task"),
        ("/h/%J.out", JOB, "%J names no single file"),
        ("/h/%s.out", JOB, "%s names no single file"),
    ],
)
def test_unfillable_patterns_are_refused_naming_the_field(pattern: str, job: OutputJob, says: str) -> None:
    with pytest.raises(FailedPrecondition, match="stdout_path") as err:
        expand(pattern, job, field="stdout_path")
    assert says in str(err.value)


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        ("/h/out-%200000000n.log", "/h/out-0000000000.log"),  # slurmstepd clamps the width to 10
        ("/h/%99999999999999999999999999j", "/h/0000000042"),  # past strtoul's range: still 10
        ("/h/%0000000000000000000003j", "/h/042"),  # leading zeros do not make a width wide
        ("/h/%10j-%11j", "/h/0000000042-0000000042"),
        ("/h/%200000000x", "/h/train"),  # no padding for text, whatever the width
    ],
)
def test_widths_are_clamped_as_slurm_clamps_them(pattern: str, path: str) -> None:
    assert expand(pattern, JOB, field="stdout_path") == path


def test_a_pattern_of_huge_widths_fills_cheaply() -> None:
    """4,096 characters of the widest patterns build a few KB at most, in milliseconds."""
    pattern = "/" + "%9999999999j" * 340
    started = time.perf_counter()
    path = expand(pattern, JOB, field="stdout_path")
    assert time.perf_counter() - started < 0.05
    assert path == "/" + "0000000042" * 340


def test_a_result_longer_than_path_max_is_refused() -> None:
    long_name = OutputJob(job_id="42", name="n" * 64)
    with pytest.raises(FailedPrecondition, match=f"stdout_path .* more than {MAX_EXPANDED} characters"):
        expand("/" + "%x" * 2000, long_name, field="stdout_path")
    assert width("7") == 7 and width("") == 0 and width("1" * 5000) == MAX_WIDTH
