"""A fake ClusterClient: the same methods, canned answers, and a record of every call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from clusterctl.errors import ServiceError
from clusterctl.v1 import cluster_pb2, jobs_pb2

T0 = 1_700_000_000  # a fixed time so rendered timestamps are stable (local time zone applies)


TEST_ENV = ("COLUMNS", "PYTEST_CURRENT_TEST")  # set by the runner, so in every environment the CLI sends


def sent_spec(fake: FakeClient) -> jobs_pb2.JobSpec:
    """The one JobSpec submitted, minus the variables the test runner itself sets."""
    specs = [arg for name, arg in fake.calls if name == "submit"]
    assert len(specs) == 1
    spec = jobs_pb2.JobSpec()
    spec.CopyFrom(specs[0])
    for name in TEST_ENV:
        spec.environment.pop(name, None)
    return spec


def job(job_id: str = "42", state: int = jobs_pb2.JOB_STATE_RUNNING, **fields: Any) -> jobs_pb2.JobStatus:
    base: dict[str, Any] = {
        "job_id": job_id,
        "name": "train",
        "user": "alice",
        "state": state,
        "checkpoint_step": -1,
        "terminal": state in (jobs_pb2.JOB_STATE_COMPLETED, jobs_pb2.JOB_STATE_FAILED, jobs_pb2.JOB_STATE_CANCELLED),
    }
    base.update(fields)
    return jobs_pb2.JobStatus(**base)


def event(
    status: jobs_pb2.JobStatus, kind: int = jobs_pb2.JOB_EVENT_TYPE_STATE_CHANGED, message: str = ""
) -> jobs_pb2.JobEvent:
    return jobs_pb2.JobEvent(type=kind, job=status, time=Timestamp(seconds=T0), message=message)


def topology() -> cluster_pb2.Topology:
    """Two leaf switches under one spine; node3 is down, node4 half busy."""

    def node(name: str, switch: str, state: int, gpus_alloc: int = 0, cpus_alloc: int = 0, **kw: Any) -> Any:
        return cluster_pb2.Node(
            name=name,
            switch=switch,
            state=state,
            gpus_total=4,
            gpus_allocated=gpus_alloc,
            cpus_total=8,
            cpus_allocated=cpus_alloc,
            memory_mb_total=16000,
            partitions=["gpu"],
            **kw,
        )

    nodes = [
        node("node1", "leaf1", cluster_pb2.NODE_STATE_IDLE),
        node("node2", "leaf1", cluster_pb2.NODE_STATE_ALLOCATED, 4, 8),
        node("node3", "leaf2", cluster_pb2.NODE_STATE_DOWN, reason="Not responding", flags=["NOT_RESPONDING"]),
        node("node4", "leaf2", cluster_pb2.NODE_STATE_MIXED, 2, 4),
    ]
    switches = [
        cluster_pb2.Switch(
            name="spine",
            level=1,
            switches=["leaf1", "leaf2"],
            nodes_total=4,
            nodes_free=1,
            gpus_total=16,
            gpus_free=6,
            cpus_total=32,
            cpus_free=12,
        ),
        cluster_pb2.Switch(
            name="leaf1",
            level=0,
            nodes=["node1", "node2"],
            nodes_total=2,
            nodes_free=1,
            gpus_total=8,
            gpus_free=4,
            cpus_total=16,
            cpus_free=8,
        ),
        cluster_pb2.Switch(
            name="leaf2",
            level=0,
            nodes=["node3", "node4"],
            nodes_total=2,
            nodes_free=0,
            gpus_total=8,
            gpus_free=2,
            cpus_total=16,
            cpus_free=4,
        ),
    ]
    return cluster_pb2.Topology(switches=switches, nodes=nodes, roots=["spine"])


class FakeClient:
    """Implements the ClusterClient methods the CLI uses; ``fail`` makes every call raise."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.jobs: dict[str, jobs_pb2.JobStatus] = {"42": job("42")}
        self.events: list[list[jobs_pb2.JobEvent]] = []  # one list per watch() call
        self.fail: ServiceError | BaseException | None = None
        self.submitted_state = jobs_pb2.JOB_STATE_PENDING
        self.placement = cluster_pb2.Placement(
            feasible=True,
            available_now=True,
            nodes=["node1", "node2"],
            switches=["leaf1"],
            spine_hops=0,
            explanation="2 nodes on leaf1",
            sbatch_args=["--switches=1@5:00"],
        )

    def _record(self, name: str, arg: Any) -> None:
        self.calls.append((name, arg))
        if self.fail is not None:
            raise self.fail

    def submit(self, spec: jobs_pb2.JobSpec) -> jobs_pb2.SubmitJobResponse:
        self._record("submit", spec)
        status = job("100", self.submitted_state, name=spec.name, placement_explanation="packed on leaf1")
        self.jobs["100"] = status
        return jobs_pb2.SubmitJobResponse(job=status)

    def get(self, job_id: str) -> jobs_pb2.JobStatus:
        self._record("get", job_id)
        if job_id not in self.jobs:
            raise ServiceError("NOT_FOUND", f"job {job_id} not found")
        return self.jobs[job_id]

    def goodput(self, job_id: str) -> jobs_pb2.GetGoodputResponse:
        self._record("goodput", job_id)
        if job_id not in self.jobs:
            raise ServiceError("NOT_FOUND", f"job {job_id} not found")
        parts = jobs_pb2.GoodputBreakdown(productive=80, queue=5, start_restore=3, checkpoint_stall=2, lost=10)
        reply = jobs_pb2.GetGoodputResponse(job_id=job_id, ettr=0.8, wall_seconds=100, breakdown=parts)
        reply.checkpoint_interval.FromSeconds(120)
        return reply

    def list_jobs(self, **kwargs: Any) -> list[jobs_pb2.JobStatus]:
        self._record("list_jobs", kwargs)
        return list(self.jobs.values())

    def cancel(self, job_id: str) -> jobs_pb2.JobStatus:
        self._record("cancel", job_id)
        if job_id not in self.jobs:
            raise ServiceError("NOT_FOUND", f"job {job_id} not found")
        return job(job_id, jobs_pb2.JOB_STATE_CANCELLED)

    def requeue(self, job_id: str) -> jobs_pb2.JobStatus:
        self._record("requeue", job_id)
        return job(job_id, jobs_pb2.JOB_STATE_PENDING)

    def watch(self, job_ids: list[str] | None = None, *, include_initial: bool = True) -> Iterator[jobs_pb2.JobEvent]:
        self._record("watch", job_ids)
        batch = self.events.pop(0) if self.events else []
        for item in batch:
            if isinstance(item, BaseException):
                raise item
            yield item

    def topology(self) -> cluster_pb2.Topology:
        self._record("topology", None)
        return topology()

    def nodes(self, *, partition: str = "") -> list[cluster_pb2.Node]:
        self._record("nodes", partition)
        return list(topology().nodes)

    def plan(self, request: cluster_pb2.PlanPlacementRequest) -> cluster_pb2.Placement:
        self._record("plan", request)
        return self.placement
