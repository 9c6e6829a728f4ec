"""Rendering from the protos alone: text snapshots of the tree and the job view, JSON shape."""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Iterator

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console, RenderableType

from clusterctl.cli import render
from clusterctl.v1 import cluster_pb2, jobs_pb2

from .fakes import T0, job, topology


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def text(renderable: RenderableType, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in out.splitlines())


TREE = """\
cluster  gpus 6/16 free  nodes 1/4 free
└── spine L1  gpus 6/16 free  nodes 1/4 free
    ├── leaf1 L0  gpus 4/8 free  nodes 1/2 free
    │   ├── node1  idle  gpus 4/4  cpus 8/8
    │   └── node2  allocated  gpus 0/4  cpus 0/8
    └── leaf2 L0  gpus 2/8 free  nodes 0/2 free
        ├── node3  down+not_responding  gpus 0/4  cpus 0/8
        └── node4  mixed  gpus 2/4  cpus 4/8"""


def test_topology_tree_snapshot() -> None:
    assert text(render.topology_tree(topology())) == TREE


def test_topology_without_roots_and_with_loose_nodes() -> None:
    topo = topology()
    del topo.roots[:]  # derived: the switch nobody lists as a child
    topo.nodes.add(name="login1", state=cluster_pb2.NODE_STATE_IDLE)
    out = text(render.topology_tree(topo))
    assert out.splitlines()[1].startswith("├── spine L1")
    assert "(no switch)" in out and "login1  idle  gpus 0/0" in out


def test_topology_without_switches() -> None:
    topo = cluster_pb2.Topology(nodes=list(topology().nodes))
    out = text(render.topology_tree(topo))
    assert out.splitlines()[0] == "cluster  gpus 6/16 free  nodes 1/4 free"
    assert "├── node1  idle  gpus 4/4  cpus 8/8" in out


JOB = """\
Job           42
Name          train
User          alice
State         FAILED  (terminal)
Reason        NonZeroExitCode
Partition     gpu
Nodes         node1,node2
Excluded      node3
Restarts      1
Exit code     1 (signal 9)
Checkpoint    1200
Submitted     2023-11-14 21:13:20
Requeued      2023-11-14 22:13:20
Started       2023-11-14 22:13:30
Ended         2023-11-14 23:15:25
Elapsed       01:01:55
Time limit    1-01:01:01
Workdir       /home/alice/run
Output        /home/alice/run/slurm-42.out
Error         (with output)
Placement     2 nodes on leaf1 (0 spine hops)
Final reason  restarts exhausted
Request id    r1

Restart history
 # ┃ TIME                ┃ CAUSE        ┃ NODES ┃ EXIT ┃ CKPT STEP ┃ DETAIL
━━━╇━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━
 1 │ 2023-11-14 22:13:20 │ NODE_FAILURE │ node3 │ 0    │ 1200      │ node3 stopped responding
 2 │ -                   │ PREEMPTED    │ -     │ 0    │ -         │ -"""


def failed_job() -> jobs_pb2.JobStatus:
    return job(
        "42",
        jobs_pb2.JOB_STATE_FAILED,
        nodes=["node1", "node2"],
        restart_count=1,
        partition="gpu",
        reason="NonZeroExitCode",
        exit_code=1,
        exit_signal=9,
        has_exit_code=True,
        original_submit_time=Timestamp(seconds=T0 - 3600),
        submit_time=Timestamp(seconds=T0),
        start_time=Timestamp(seconds=T0 + 10),
        end_time=Timestamp(seconds=T0 + 3725),
        time_limit=Duration(seconds=90061),
        working_directory="/home/alice/run",
        stdout_path="/home/alice/run/slurm-42.out",
        placement_explanation="2 nodes on leaf1 (0 spine hops)",
        final_reason="restarts exhausted",
        checkpoint_step=1200,
        excluded_nodes=["node3"],
        request_id="r1",
        restarts=[
            jobs_pb2.RestartRecord(
                cause=jobs_pb2.TERMINATION_CAUSE_NODE_FAILURE,
                failed_nodes=["node3"],
                time=Timestamp(seconds=T0),
                checkpoint_step=1200,
                detail="node3 stopped responding",
            ),
            jobs_pb2.RestartRecord(cause=jobs_pb2.TERMINATION_CAUSE_PREEMPTED, checkpoint_step=-1),
        ],
    )


def test_job_detail_snapshot() -> None:
    assert text(render.job_detail(failed_job())) == JOB


def test_job_detail_says_the_checkpoint_tier_after_the_checkpoint() -> None:
    job = failed_job()
    job.spec.checkpoint_tier = "memory"
    lines = text(render.job_detail(job)).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Checkpoint tier"))
    assert lines[at].split() == ["Checkpoint", "tier", "memory"] and lines[at - 1].startswith("Checkpoint ")


def rows(renderable: RenderableType) -> dict[str, str]:
    pairs = (re.split(r"\s{2,}", line, maxsplit=1) for line in text(renderable).splitlines())
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def test_pending_job_shows_no_exit_code_and_its_first_submission() -> None:
    """A pending job has no exit code (not "0"); never requeued, Submitted is its only submit time."""
    pending = job(
        "43",
        jobs_pb2.JOB_STATE_PENDING,
        reason="Priority",
        submit_time=Timestamp(seconds=T0),
        original_submit_time=Timestamp(seconds=T0),
        working_directory="/home/alice",
        stdout_path="/home/alice/out-43.log",
        stderr_path="/home/alice/err-43.log",
    )
    view = rows(render.job_detail(pending))
    assert "Exit code" not in view and "Requeued" not in view
    assert view["Submitted"] == "2023-11-14 22:13:20"
    assert (view["Started"], view["Elapsed"], view["Time limit"]) == ("-", "-", "partition default")
    assert (view["Output"], view["Error"]) == ("/home/alice/out-43.log", "/home/alice/err-43.log")


def test_running_job_elapsed_counts_to_now_and_old_servers_still_show_submitted() -> None:
    running = job("44", submit_time=Timestamp(seconds=T0), start_time=Timestamp(seconds=T0 + 5))
    view = rows(render.job_detail(running, now=T0 + 90_005))
    assert view["Elapsed"] == "1-01:00:00"
    assert view["Submitted"] == "2023-11-14 22:13:20"  # no original_submit_time: submit_time it is
    assert "Exit code" not in view


def test_straggler_nodes_show_with_their_ratio() -> None:
    running = job("46", stragglers=[jobs_pb2.Straggler(node="node2", ratio=2.04)])
    assert rows(render.job_detail(running))["Stragglers"] == "node2 (2.04x)"
    assert "Stragglers" not in rows(render.job_detail(job("47")))


def test_completed_job_with_exit_code_zero_shows_it() -> None:
    done = job("45", jobs_pb2.JOB_STATE_COMPLETED, has_exit_code=True, exit_code=0)
    assert rows(render.job_detail(done))["Exit code"] == "0"


def test_jobs_table_escapes_markup_and_shows_final_reason() -> None:
    out = text(
        render.jobs_table([failed_job(), job("7", jobs_pb2.JOB_STATE_PENDING, name="[bold]x", reason="Priority")])
    )
    assert "[bold]x" in out
    assert "restarts exhausted" in out  # a terminal job shows why the service stopped
    assert "Priority" in out


def test_placement_view() -> None:
    plan = cluster_pb2.Placement(feasible=True, available_now=False, switches=["leaf1"], explanation="wait for leaf1")
    out = text(render.placement(plan))
    assert "Available now  no (would wait)" in out
    assert "Nodes          -" in out


def test_nodes_table() -> None:
    out = text(render.nodes_table(topology().nodes), width=120)
    header, _rule, *rows = out.splitlines()
    assert header.split("┃")[0].strip() == "NODE"
    assert [cell.strip() for cell in rows[0].split("│")] == [
        "node1",
        "idle",
        "leaf1",
        "4/4",
        "8/8",
        "15.6G/15.6G",
        "gpu",
        "-",
    ]
    assert "Not responding" in out


def test_nodes_table_shows_clusterds_failure_record_when_a_node_has_one() -> None:
    nodes = list(topology().nodes)
    assert "HEALTH" not in text(render.nodes_table(nodes), width=160)
    nodes[0].health = "failed 2 jobs (1 hang, 1 node death); drained by clusterd"
    out = text(render.nodes_table(nodes), width=200)
    assert "HEALTH" in out and "(1 hang, 1 node death); drained by clusterd" in out


def test_json_uses_proto_field_names_and_keeps_defaults() -> None:
    data = render.to_dict(failed_job())
    assert data["job_id"] == "42"
    assert data["state"] == "JOB_STATE_FAILED"
    assert data["checkpoint_step"] == 1200  # int64 as a number
    assert data["submit_time"] == "2023-11-14T22:13:20Z"
    assert data["restarts"][0]["failed_nodes"] == ["node3"]
    assert job("1", jobs_pb2.JOB_STATE_RUNNING).terminal is False
    assert render.to_dict(job("1", jobs_pb2.JOB_STATE_RUNNING))["terminal"] is False  # present even when false
    assert json.loads(render.dumps(data)) == data
    assert "\n" not in render.dumps(data)


def test_state_names() -> None:
    assert render.parse_job_state("running") == jobs_pb2.JOB_STATE_RUNNING
    assert render.parse_job_state("JOB_STATE_NODE_FAIL") == jobs_pb2.JOB_STATE_NODE_FAIL
    assert render.parse_job_state("node-fail") == jobs_pb2.JOB_STATE_NODE_FAIL
    with pytest.raises(ValueError, match="choose from pending, running"):
        render.parse_job_state("sleeping")
    assert render.job_state(999) == "STATE_999"
