"""Read and control commands through ``main`` with a fake client: calls made, output, exit codes."""

from __future__ import annotations

import json
import sys

import pytest

from clusterctl.errors import ServiceError
from clusterctl.v1 import cluster_pb2, jobs_pb2

from .conftest import Runner
from .fakes import FakeClient, event, job


def test_status_text_and_json(cli: Runner, fake: FakeClient) -> None:
    r = cli("status", "42")
    assert r.code == 0
    assert "Job" in r.out and "42" in r.out and "RUNNING" in r.out
    r = cli("status", "42", "--json")
    data = json.loads(r.out)
    assert data["job_id"] == "42" and data["state"] == "JOB_STATE_RUNNING"
    assert ("get", "42") in fake.calls


def test_status_not_found_exits_1(cli: Runner) -> None:
    r = cli("status", "999")
    assert (r.code, r.out, r.err) == (1, "", "clusterctl: error: job 999 not found\n")


def test_list_filters_reach_the_client(cli: Runner, fake: FakeClient) -> None:
    r = cli("list", "--all-users", "--finished", "--state", "running,pending", "-s", "failed", "--limit", "5")
    assert r.code == 0, r.err
    assert fake.calls[-1] == (
        "list_jobs",
        {
            "states": [jobs_pb2.JOB_STATE_RUNNING, jobs_pb2.JOB_STATE_PENDING, jobs_pb2.JOB_STATE_FAILED],
            "user": "*",
            "include_finished": True,
            "limit": 5,
        },
    )
    assert "JOBID" in r.out and "train" in r.out
    cli("list", "--user", "bob")
    assert fake.calls[-1][1]["user"] == "bob"


def test_list_json_and_empty(cli: Runner, fake: FakeClient) -> None:
    data = json.loads(cli("list", "--json").out)
    assert [j["job_id"] for j in data["jobs"]] == ["42"]
    fake.jobs.clear()
    assert json.loads(cli("list", "--json").out) == {"jobs": []}
    assert "No jobs." in cli("list").out


def test_list_bad_state_and_conflicting_users(cli: Runner) -> None:
    r = cli("list", "--state", "sleeping")
    assert r.code == 2 and "unknown job state 'sleeping'" in r.err
    r = cli("list", "--all-users", "--user", "bob")
    assert r.code == 2 and "not allowed with argument" in r.err


def test_watch_json_lines_until_done(cli: Runner, fake: FakeClient) -> None:
    fake.events = [
        [
            event(job("1", jobs_pb2.JOB_STATE_RUNNING), jobs_pb2.JOB_EVENT_TYPE_SNAPSHOT),
            event(job("2", jobs_pb2.JOB_STATE_PENDING), jobs_pb2.JOB_EVENT_TYPE_SNAPSHOT),
            event(job("1", jobs_pb2.JOB_STATE_COMPLETED), jobs_pb2.JOB_EVENT_TYPE_FINISHED),
            event(job("2", jobs_pb2.JOB_STATE_COMPLETED), jobs_pb2.JOB_EVENT_TYPE_FINISHED),
        ]
    ]
    r = cli("watch", "1", "2", "--json", "--until-done")
    assert r.code == 0, r.err
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert [(e["type"], e["job"]["job_id"]) for e in rows] == [
        ("JOB_EVENT_TYPE_SNAPSHOT", "1"),
        ("JOB_EVENT_TYPE_SNAPSHOT", "2"),
        ("JOB_EVENT_TYPE_FINISHED", "1"),
        ("JOB_EVENT_TYPE_FINISHED", "2"),
    ]
    assert ("watch", ["1", "2"]) in fake.calls


def test_watch_until_done_fails_when_a_job_failed(cli: Runner, fake: FakeClient) -> None:
    fake.events = [
        [event(job("1", jobs_pb2.JOB_STATE_COMPLETED)), event(job("2", jobs_pb2.JOB_STATE_FAILED, reason="x"))]
    ]
    r = cli("watch", "1", "2", "--until-done")
    assert r.code == 1
    lines = r.out.splitlines()  # not a terminal: one line per event
    assert len(lines) == 2 and "COMPLETED" in lines[0] and "FAILED" in lines[1]


def test_watch_until_done_without_ids_uses_unfinished_jobs(cli: Runner, fake: FakeClient) -> None:
    fake.jobs = {"5": job("5", jobs_pb2.JOB_STATE_RUNNING), "6": job("6", jobs_pb2.JOB_STATE_COMPLETED)}
    fake.events = [[event(job("5", jobs_pb2.JOB_STATE_COMPLETED))]]
    r = cli("watch", "--until-done")
    assert r.code == 0
    assert ("watch", ["5"]) in fake.calls
    fake.jobs = {}
    assert cli("watch", "--until-done").code == 0  # nothing to wait for


def test_watch_ctrl_c_exits_0_quietly(cli: Runner, fake: FakeClient) -> None:
    fake.events = [[event(job("1")), KeyboardInterrupt()]]  # type: ignore[list-item]
    r = cli("watch")
    assert r.code == 0 and r.err == ""


def test_watch_gives_up_after_repeated_unavailable(
    cli: Runner, fake: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("clusterctl.cli.jobs.time.sleep", lambda _s: None)
    fake.events = [[ServiceError("UNAVAILABLE", "cannot reach clusterd: refused")] for _ in range(10)]  # type: ignore[misc]
    r = cli("watch", "1")
    assert r.code == 1
    assert r.err.startswith("clusterctl: error: cannot reach clusterd") and r.err.count("\n") == 1


def test_cancel_and_requeue_many(cli: Runner, fake: FakeClient) -> None:
    r = cli("cancel", "42", "999", "42")
    assert r.code == 1  # one failed, the rest were still cancelled
    assert r.out.splitlines() == ["Cancelled job 42: CANCELLED", "Cancelled job 42: CANCELLED"]
    assert r.err == "clusterctl: error: job 999: job 999 not found\n"
    r = cli("requeue", "42", "--json")
    assert r.code == 0 and json.loads(r.out)["state"] == "JOB_STATE_PENDING"


def test_topology_nodes_plan(cli: Runner, fake: FakeClient) -> None:
    r = cli("topology")
    assert r.code == 0 and "leaf1 L0  gpus 4/8 free" in r.out and "node4  mixed" in r.out
    r = cli("topology", "--no-nodes")
    assert "leaf1" in r.out and "node1" not in r.out
    data = json.loads(cli("topology", "--json").out)
    assert data["roots"] == ["spine"] and data["switches"][1]["nodes"] == ["node1", "node2"]
    assert data["switches"][0]["gpus_free"] == 6
    r = cli("nodes", "-p", "gpu")
    assert r.code == 0 and "node3" in r.out and ("nodes", "gpu") in fake.calls
    assert [n["name"] for n in json.loads(cli("nodes", "--json").out)["nodes"]] == ["node1", "node2", "node3", "node4"]

    r = cli("plan", "-N", "4", "--gpus-per-node", "4", "--placement", "exact", "--switches", "2", "-x", "node[3-4]")
    assert r.code == 0, r.err
    assert fake.calls[-1] == (
        "plan",
        cluster_pb2.PlanPlacementRequest(
            nodes=4,
            gpus_per_node=4,
            placement=cluster_pb2.PlacementPreference(
                policy=cluster_pb2.PLACEMENT_POLICY_EXACT, switch_count=2, exclude_nodes=["node3", "node4"]
            ),
        ),
    )
    assert "Feasible       yes" in r.out and "--switches=1@5:00" in r.out
    data = json.loads(cli("plan", "--json").out)
    assert data["feasible"] is True and data["sbatch_args"] == ["--switches=1@5:00"]
    assert fake.calls[-1] == ("plan", cluster_pb2.PlanPlacementRequest(nodes=1))


def test_watch_orders_array_tasks_after_their_job() -> None:
    from clusterctl.cli.jobs import _job_key

    ids = ["14_10", "9", "x", "14_2", "14", "100"]
    assert sorted(ids, key=_job_key) == ["9", "14", "14_2", "14_10", "100", "x"]
    assert _job_key("1_\u00b2") == (sys.maxsize, 0, "1_\u00b2")  # not a number, not a crash
