"""PyslurmBackend's mapping logic against a FAKE ``pyslurm`` module injected into sys.modules.

The fake is a stand-in for unit logic only (attribute names from pyslurm's 25.x API docs); it is not
a contract test. Real pyslurm cannot be built here (PyPI has 25.11, Debian ships Slurm 22.05); the
contract tests in tests/contract/ skip with :func:`unavailable_reason`'s words.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError, SlurmUnavailable
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.pyslurm_backend import PyslurmBackend, submit_attributes, unavailable_reason
from clusterd.slurm.request import JobRequest, Signal
from clusterd.slurm.types import JobState, NodeState


class FakeRPCError(Exception):
    pass


@dataclass
class FakeJob:
    id: int
    name: str = ""
    user_name: str = ""
    state: str = "PENDING"
    state_reason: str = "None"
    allocated_nodes: str | None = None
    partition: str = "debug"
    exit_code: int = 0
    exit_code_signal: int = 0
    submit_time: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    requeue_count: int = 0
    excluded_nodes: str | None = None
    is_requeueable: bool = True
    comment: str = ""
    batch_host: str = ""


@dataclass
class FakeNode:
    name: str
    state: str = "IDLE"
    total_cpus: int = 4
    allocated_cpus: int = 0
    configured_gres: dict[str, Any] = field(default_factory=lambda: {"gpu": 4})
    allocated_gres: dict[str, Any] = field(default_factory=dict)
    real_memory: int = 2048
    allocated_memory: int = 0
    partitions: list[str] = field(default_factory=lambda: ["debug", "batch"])
    active_features: list[str] = field(default_factory=list)
    available_features: list[str] = field(default_factory=list)
    reason: str | None = None


def fake_pyslurm(version: str = "25.11.2") -> types.ModuleType:
    """A module with the few pyslurm names the backend uses; it records every call in ``calls``."""
    mod = types.ModuleType("pyslurm")
    calls: list[tuple[Any, ...]] = []
    jobs: dict[int, FakeJob] = {
        24: FakeJob(
            24,
            "twonode",
            "alice",
            "RUNNING",
            allocated_nodes="node[2-3]",
            submit_time=1795347032,
            start_time=1795347033,
            batch_host="node2",
        ),
        26: FakeJob(26, "fail3", "alice", "FAILED", "NonZeroExitCode", "node1", exit_code=3, end_time=1795347033),
        32: FakeJob(32, "requeueme", "alice", "PENDING", "BeginTime", requeue_count=1, excluded_nodes="node4"),
    }
    nodes = {
        "node1": FakeNode("node1", "MIXED", allocated_cpus=1, allocated_gres={"gpu": {"count": 2, "indexes": "0-1"}}),
        "node4": FakeNode("node4", "DOWN+NOT_RESPONDING", reason="Not responding"),
        "node6": FakeNode("node6", "IDLE+DRAIN", reason="maintenance", active_features=["a100"]),
    }

    class JobSubmitDescription:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs
            calls.append(("JobSubmitDescription", kwargs))

        def submit(self) -> int:
            if self.kwargs.get("partition") == "nosuch":
                raise FakeRPCError("Invalid partition name specified")
            return 77

    class Job:
        def __init__(self, job_id: int) -> None:
            self.id = job_id

        def cancel(self) -> None:
            if self.id == 999:
                raise FakeRPCError("Unable to contact slurm controller (connect failure)")
            calls.append(("cancel", self.id))

        def requeue(self) -> None:
            calls.append(("requeue", self.id))

        def modify(self, changes: JobSubmitDescription) -> None:
            calls.append(("modify", self.id, changes.kwargs))

    class Jobs:
        @staticmethod
        def load() -> dict[int, FakeJob]:
            return jobs

    class Nodes:
        @staticmethod
        def load() -> dict[str, FakeNode]:
            return nodes

    class Partitions:
        @staticmethod
        def load() -> dict[str, Any]:
            return {"debug": types.SimpleNamespace(name="debug"), "batch": types.SimpleNamespace(name="batch")}

    mod.JobSubmitDescription = JobSubmitDescription  # type: ignore[attr-defined]
    mod.Job = Job  # type: ignore[attr-defined]
    mod.Jobs = Jobs  # type: ignore[attr-defined]
    mod.Nodes = Nodes  # type: ignore[attr-defined]
    mod.Partitions = Partitions  # type: ignore[attr-defined]
    mod.RPCError = FakeRPCError  # type: ignore[attr-defined]
    mod.version = lambda: version  # type: ignore[attr-defined]
    mod.calls = calls  # type: ignore[attr-defined]
    return mod


@pytest.fixture
def pyslurm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    mod = fake_pyslurm()
    monkeypatch.setitem(sys.modules, "pyslurm", mod)
    return mod


def test_submit_attributes_from_the_request() -> None:
    req = JobRequest(
        script="#!/bin/bash\nsrun train.py\n",
        name="svc",
        user="",
        nodes=2,
        gpus_per_node=4,
        signal=Signal("USR1", 120),
        exclude=("node4",),
        working_directory="/w",
        submit_directory="/s",
    )
    attrs = submit_attributes(req)
    assert (attrs["name"], attrs["nodes"], attrs["gpus_per_node"]) == ("svc", 2, 4)
    assert (attrs["is_requeueable"], attrs["signal"], attrs["log_files_open_mode"]) == (True, "B:USR1@120", "append")
    assert (attrs["excluded_nodes"], attrs["working_directory"]) == (["node4"], "/w")
    assert attrs["environment"]["SLURM_SUBMIT_DIR"] == "/s"
    assert attrs["script"] == req.script


async def test_backend_maps_jobs_nodes_and_partitions(pyslurm: types.ModuleType) -> None:
    backend = PyslurmBackend(SlurmConfig(backend="pyslurm"))
    assert isinstance(backend, SlurmBackend)
    jobs = {j.job_id: j for j in await backend.list_jobs()}
    assert (jobs["24"].state, jobs["24"].nodes, jobs["24"].reason, jobs["24"].batch_host) == (
        JobState.RUNNING,
        ("node2", "node3"),
        "",
        "node2",
    )
    assert (jobs["24"].submit_time, jobs["24"].end_time) == (1795347032.0, None)
    assert (jobs["26"].state, jobs["26"].exit_code, jobs["26"].reason) == (JobState.FAILED, 3, "NonZeroExitCode")
    assert (jobs["32"].restart_count, jobs["32"].excluded_nodes, jobs["32"].reason) == (1, ("node4",), "BeginTime")
    nodes = {n.name: n for n in await backend.list_nodes()}
    assert (nodes["node1"].state, nodes["node1"].gpus_allocated, nodes["node1"].gpus_total) == (NodeState.MIXED, 2, 4)
    assert (nodes["node4"].state, nodes["node4"].flags) == (NodeState.DOWN, ("NOT_RESPONDING",))
    assert (nodes["node6"].state, nodes["node6"].features, nodes["node6"].reason) == (
        NodeState.DRAINED,
        ("a100",),
        "maintenance",
    )
    assert nodes["node1"].partitions == ("debug", "batch")
    assert await backend.partitions() == ["debug", "batch"]


async def test_backend_actions_call_pyslurm(pyslurm: types.ModuleType) -> None:
    backend = PyslurmBackend(SlurmConfig(backend="pyslurm"))
    assert await backend.submit(JobRequest(script="#!/bin/sh\ntrue\n", name="x", user="")) == "77"
    await backend.cancel("24")
    await backend.requeue("24")
    await backend.update_job("32", exclude_nodes=("node4", "node5"), start_after=0)
    await backend.update_job("32")  # nothing to change: no RPC
    calls = pyslurm.calls  # type: ignore[attr-defined]
    assert ("cancel", 24) in calls and ("requeue", 24) in calls
    (modify,) = [c for c in calls if c[0] == "modify"]
    assert modify[1] == 32 and modify[2]["excluded_nodes"] == "node4,node5" and modify[2]["begin_time"] > 1.7e9


async def test_pyslurm_errors_become_slurm_errors(pyslurm: types.ModuleType) -> None:
    from clusterd.observability.metrics import REGISTRY

    def count(command: str, outcome: str) -> float:
        labels = {"backend": "pyslurm", "command": command, "outcome": outcome}
        return REGISTRY.get_sample_value("clusterd_slurm_calls_total", labels) or 0.0

    before = (count("submit", "error"), count("cancel", "unavailable"))
    backend = PyslurmBackend(SlurmConfig(backend="pyslurm"))
    with pytest.raises(SlurmError, match="Invalid partition") as err:
        await backend.submit(JobRequest(script="#!/bin/sh\ntrue\n", name="x", user="", partition="nosuch"))
    assert not isinstance(err.value, SlurmUnavailable)
    with pytest.raises(SlurmUnavailable):
        await backend.cancel("999")
    assert (count("submit", "error"), count("cancel", "unavailable")) == (before[0] + 1, before[1] + 1)


def test_unavailable_reason_version_mismatch_and_match(pyslurm: types.ModuleType) -> None:
    assert unavailable_reason("22.05.8") == "pyslurm 25.11.2 is built for Slurm 25.11 but this cluster runs 22.05.8"
    assert unavailable_reason("slurm 25.11.0") is None


def test_unavailable_reason_when_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import raises ImportError
    reason = unavailable_reason("22.05.8")
    assert reason is not None and reason.startswith("pyslurm is not importable: ") and "\n" not in reason


def test_unavailable_reason_asks_sbatch_when_no_version_given(pyslurm: types.ModuleType, tmp_path: Any) -> None:
    sbatch = tmp_path / "sbatch"
    sbatch.write_text("#!/bin/sh\necho 'slurm-wlm 22.05.8'\n")
    sbatch.chmod(0o755)
    reason = unavailable_reason(config=SlurmConfig(bin_dir=str(tmp_path)))
    assert reason == "pyslurm 25.11.2 is built for Slurm 25.11 but this cluster runs 22.05.8"
    missing = unavailable_reason(config=SlurmConfig(bin_dir=str(tmp_path / "nope")))
    assert missing is not None and missing.startswith("cannot read the running Slurm's version")
