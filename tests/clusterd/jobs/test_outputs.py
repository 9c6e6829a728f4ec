"""Slurm's filename patterns filled for one job or array task (clusterd.jobs.outputs)."""

from __future__ import annotations

import pytest

from clusterd.errors import FailedPrecondition
from clusterd.jobs.outputs import OutputJob, expand

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
