"""``ID_TASK`` as callers send it: accepted where a job id is, refused with the field named."""

from __future__ import annotations

import pytest

from clusterd.errors import InvalidArgument
from clusterd.jobs.manager import check_job_id


@pytest.mark.parametrize(("text", "want"), [("14", ("14", None)), ("14_3", ("14", 3))])
def test_job_and_task_ids_are_accepted(text: str, want: tuple[str, int | None]) -> None:
    assert check_job_id(text) == want


@pytest.mark.parametrize("text", ["14_", "14_x", "14_[1-3]", "x14", "-1"])
def test_bad_ids_name_the_field(text: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_job_id(text, "job_ids")
    assert "job_ids" in str(caught.value) and "N_TASK" in str(caught.value)


def test_an_empty_id_is_required() -> None:
    with pytest.raises(InvalidArgument, match=r"job_id.*required"):
        check_job_id("")
