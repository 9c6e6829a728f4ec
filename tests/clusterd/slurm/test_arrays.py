"""Array jobs as squeue shows them: parsed from real captures, ids, task strings, derived state."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from clusterd.slurm.arrays import compress, derive_state, split_task_id, task_indices
from clusterd.slurm.parse import parse_squeue, parse_squeue_data
from clusterd.slurm.pyslurm_backend import job_from_pyslurm
from clusterd.slurm.request import ArraySpec
from clusterd.slurm.types import JobState

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


def test_running_array_shows_tasks_and_the_pending_range() -> None:
    jobs = parse_squeue((FIXTURES / "squeue_array_running_pending.json").read_text())
    shown = {j.display_id: (j.job_id, j.state) for j in jobs}
    assert shown == {
        "308_0": ("309", JobState.COMPLETED),
        "308_1": ("310", JobState.COMPLETED),
        "308_2": ("311", JobState.RUNNING),
        "308_3": ("312", JobState.RUNNING),
        "308_[4-9%2]": ("308", JobState.PENDING),
        "313": ("313", JobState.RUNNING),
    }
    pending = next(j for j in jobs if j.job_id == "308")
    assert pending.array_job_id == "308" and pending.array_task_id is None and pending.array_pending == "4-9%2"
    plain = next(j for j in jobs if j.job_id == "313")
    assert not plain.in_array and plain.array_task_id is None


def test_finished_array_keeps_each_tasks_exit_and_the_last_task_takes_the_array_id() -> None:
    jobs = {j.array_task_id: j for j in parse_squeue((FIXTURES / "squeue_array_finished.json").read_text())}
    assert sorted(jobs) == list(range(10))
    assert jobs[2].state == JobState.FAILED and jobs[2].exit_code == 3 and jobs[2].reason == "NonZeroExitCode"
    assert jobs[9].job_id == "308" and jobs[9].array_job_id == "308"
    assert all(j.state == JobState.COMPLETED for t, j in jobs.items() if t != 2)


def test_newer_shapes_wrap_array_numbers() -> None:
    """23.02+: ``array_job_id``/``array_task_id`` are {"set", "number"}; unset on plain jobs."""

    def job(job_id: int, array: int, task: int | None, string: str = "") -> dict[str, object]:
        return {
            "job_id": job_id,
            "job_state": ["PENDING"] if task is None else ["RUNNING"],
            "array_job_id": {"set": bool(array), "infinite": False, "number": array},
            "array_task_id": {"set": task is not None, "infinite": False, "number": task or 0},
            "array_task_string": string,
        }

    jobs = parse_squeue_data({"jobs": [job(14, 14, None, "3-9%2"), job(15, 14, 1), job(16, 0, None)]})
    assert [j.display_id for j in jobs] == ["14_[3-9%2]", "14_1", "16"]


@pytest.mark.parametrize(("text", "want"), [("14", ("14", None)), ("14_3", ("14", 3)), ("007_0", ("007", 0))])
def test_split_task_id(text: str, want: tuple[str, int | None]) -> None:
    assert split_task_id(text) == want


@pytest.mark.parametrize("text", ["", "14_", "_3", "14_3_1", "14_[1-3]", "abc", "14 3", "1" * 21])
def test_split_task_id_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="N or N_TASK"):
        split_task_id(text)


def test_task_strings_expand_and_compress() -> None:
    assert task_indices("4-9%2") == (4, 5, 6, 7, 8, 9)
    assert task_indices("[1,3,10-14:2]") == (1, 3, 10, 12, 14)
    assert compress([9, 0, 1, 2, 5, 6]) == "0-2,5-6,9"
    assert ArraySpec((0, 1, 2, 7), 2).render() == "0-2,7%2"
    with pytest.raises(ValueError):
        task_indices("3-1")


@pytest.mark.parametrize(
    ("states", "want"),
    [
        ([JobState.COMPLETED, JobState.RUNNING, JobState.PENDING], JobState.RUNNING),
        ([JobState.COMPLETED, JobState.FAILED, JobState.RUNNING], JobState.RUNNING),
        ([JobState.COMPLETED, JobState.PENDING], JobState.PENDING),
        ([JobState.COMPLETED, JobState.COMPLETED], JobState.COMPLETED),
        ([JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED], JobState.FAILED),
        ([JobState.COMPLETED, JobState.CANCELLED], JobState.CANCELLED),
        ([JobState.TIMEOUT, JobState.COMPLETED], JobState.TIMEOUT),
        ([JobState.COMPLETING, JobState.COMPLETED], JobState.RUNNING),
        ([], JobState.PENDING),
    ],
)
def test_array_state_is_derived_from_its_tasks(states: list[JobState], want: JobState) -> None:
    assert derive_state(states) == want


def test_fixture_is_real_slurm_output() -> None:
    data = json.loads((FIXTURES / "squeue_array_finished.json").read_text())
    assert data["meta"]["Slurm"]["release"].startswith("22.05")


def test_pyslurm_jobs_carry_their_array_fields() -> None:
    def pyjob(**kw: object) -> SimpleNamespace:
        return SimpleNamespace(id=kw.pop("id"), state="PENDING", **kw)

    pending = job_from_pyslurm(pyjob(id=14, array_id=14, array_task_id=None, array_tasks_waiting="3-9%2"))
    task = job_from_pyslurm(pyjob(id=15, array_id=14, array_task_id=1))
    plain = job_from_pyslurm(pyjob(id=16, array_id=0))
    assert [pending.display_id, task.display_id, plain.display_id] == ["14_[3-9%2]", "14_1", "16"]
