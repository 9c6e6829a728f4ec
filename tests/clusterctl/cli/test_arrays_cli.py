"""Array jobs in the CLI: ``list`` collapsed like squeue (``--array`` expanded), ``status`` with the
tasks table, ``ID_TASK`` for status/watch, and ``submit --wait`` waiting for every task."""

from __future__ import annotations

from clusterctl.cli import arrays
from clusterctl.v1 import jobs_pb2 as S

from .conftest import Runner
from .fakes import FakeClient, event, job

_DONE = dict(has_exit_code=True)


def array_job(
    job_id: str = "14", *, terminal: bool = False, state: int = S.JOB_STATE_RUNNING, **fields: object
) -> S.JobStatus:
    """Array 14 (0-5): 0 completed, 1 failed (exit 3), 2 running, 3 requeued, 4-5 not started."""
    tasks = [
        S.ArrayTask(task_id=0, state=S.JOB_STATE_COMPLETED, **_DONE),  # type: ignore[arg-type]
        S.ArrayTask(task_id=1, state=S.JOB_STATE_FAILED, exit_code=3, nodes=["node2"], **_DONE),  # type: ignore[arg-type]
        S.ArrayTask(task_id=2, state=S.JOB_STATE_RUNNING, nodes=["node1"]),
        S.ArrayTask(task_id=3, state=S.JOB_STATE_PENDING, restart_count=1),
        S.ArrayTask(task_id=4, state=S.JOB_STATE_PENDING),
        S.ArrayTask(task_id=5, state=S.JOB_STATE_PENDING),
    ]
    return job(job_id, state, array="0-5", tasks=tasks, terminal=terminal, reason="Resources", **fields)


def test_rows_collapse_pending_tasks_like_squeue() -> None:
    ids = [(r.job_id, r.state) for r in arrays.rows([array_job(), job("15")])]
    assert ids == [
        ("14_[4-5]", S.JOB_STATE_PENDING),
        ("14_0", S.JOB_STATE_COMPLETED),
        ("14_1", S.JOB_STATE_FAILED),
        ("14_2", S.JOB_STATE_RUNNING),
        ("14_3", S.JOB_STATE_PENDING),
        ("15", S.JOB_STATE_RUNNING),
    ]
    expanded = [r.job_id for r in arrays.rows([array_job()], expand=True)]
    assert expanded == [f"14_{i}" for i in range(6)]


def test_task_view_is_the_task() -> None:
    view = arrays.task_view(array_job(), 1)
    assert (view.job_id, view.state, view.exit_code, list(view.nodes)) == ("14_1", S.JOB_STATE_FAILED, 3, ["node2"])
    assert view.terminal and view.has_exit_code and view.reason == "" and len(view.tasks) == 1
    assert arrays.split_id("14_1") == ("14", 1) and arrays.split_id("14") == ("14", None)
    assert arrays.split_id("14_\u00b2") == ("14_\u00b2", None)  # '²'.isdigit() but int('²') fails
    assert arrays.compress([5, 3, 4, 9]) == "3-5,9"


def test_list_shows_tasks(cli: Runner, fake: FakeClient) -> None:
    fake.jobs = {"14": array_job()}
    r = cli("list")
    assert r.code == 0
    for row in ("14_[4-5]", "14_0", "14_1", "14_2", "14_3"):
        assert row in r.out
    assert "14_4 " not in r.out
    r = cli("list", "--array")
    assert "14_4" in r.out and "14_5" in r.out and "14_[" not in r.out


def test_status_of_an_array_has_the_tasks_table(cli: Runner, fake: FakeClient) -> None:
    fake.jobs = {"14": array_job()}
    r = cli("status", "14")
    assert r.code == 0 and "Array tasks" in r.out and "0-5" in r.out
    assert "14_1" in r.out and "FAILED" in r.out


def test_watch_one_task_until_it_ends(cli: Runner, fake: FakeClient) -> None:
    running = array_job()
    fake.events = [[event(running)]]
    r = cli("watch", "14_1", "--until-done", "--json")
    assert r.code == 1  # task 1 failed; the array itself is still running
    assert ("watch", ["14_1"]) in fake.calls


def test_wait_waits_for_every_task_and_exits_with_the_first_failure(cli: Runner, fake: FakeClient) -> None:
    fake.submitted_state = S.JOB_STATE_PENDING
    final = array_job("100", terminal=True, state=S.JOB_STATE_FAILED, exit_code=3, has_exit_code=True)
    fake.events = [[event(array_job("100")), event(final)]]
    r = cli("submit", "--wait", "--array", "0-5", "--", "true")
    assert r.code == 3


def test_wait_on_an_array_killed_by_a_signal_exits_128_plus_it(cli: Runner, fake: FakeClient) -> None:
    final = array_job("100", terminal=True, state=S.JOB_STATE_FAILED, exit_signal=9, has_exit_code=True)
    fake.events = [[event(final)]]
    assert cli("submit", "--wait", "--array", "0-5", "--", "true").code == 137
