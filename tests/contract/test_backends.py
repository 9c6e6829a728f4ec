"""The SlurmBackend contract, run against the real stack for every backend (commands, slurmrestd, pyslurm)."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from clusterd.errors import SlurmError, SlurmUnavailable
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.request import Signal, Switches
from clusterd.slurm.types import JobState
from tests.support.backends import JobUser, submit_args, tag, wait_job
from tests.support.stack import Stack

pytestmark = pytest.mark.slurm


def squeue_user(stack: Stack, job_id: str) -> str:
    """The job's owner as Slurm's own squeue prints it (independent of the backend under test)."""
    out = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%u"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": stack.command_path(), "SLURM_CONF": stack.slurm_conf},
        check=True,
    )
    return out.stdout.strip()


async def test_version(backend: SlurmBackend, stack: Stack) -> None:
    assert (await backend.version()).startswith(stack.slurm_version + ".")


async def test_partitions(backend: SlurmBackend) -> None:
    assert {"debug", "batch"} <= set(await backend.partitions())


async def test_nodes(backend: SlurmBackend) -> None:
    nodes = {n.name: n for n in await backend.list_nodes()}
    assert sorted(nodes) == [f"node{i}" for i in range(1, 7)]
    assert all(n.gpus_total == 4 and n.cpus_total == 4 for n in nodes.values())
    assert all({"debug", "batch"} <= set(n.partitions) for n in nodes.values())


async def test_topology(backend: SlurmBackend) -> None:
    switches = {s.name: s for s in await backend.topology()}
    assert set(switches) == {"leaf1", "leaf2", "spine"}
    assert switches["leaf1"].nodes == ("node1", "node2", "node3")
    assert switches["leaf2"].nodes == ("node4", "node5", "node6")
    assert set(switches["spine"].switches) == {"leaf1", "leaf2"}


async def test_submit_as_user_update_and_cancel(backend: SlurmBackend, stack: Stack, alice: JobUser) -> None:
    name, comment = tag(), tag()
    args = submit_args(
        alice,
        name=name,
        comment=comment,
        partition="batch",
        nodes=2,
        tasks_per_node=1,
        cpus_per_task=1,
        gpus_per_node=1,
        memory_mb_per_node=100,
        hold=True,
    )
    job_id = await backend.submit(args)
    assert job_id.isdigit()
    try:
        job = await wait_job(backend, job_id, lambda j: True, "the job to be listed", timeout=20)
        assert (job.user, job.name, job.comment, job.partition) == ("alice", name, comment, "batch")
        assert job.state is JobState.PENDING and job.requeue
        assert squeue_user(stack, job_id) == "alice"

        await backend.update_job(job_id, exclude_nodes=("node1", "node2"), start_after=3600)
        job = await wait_job(backend, job_id, lambda j: bool(j.excluded_nodes), "the exclusion", timeout=20)
        assert set(job.excluded_nodes) == {"node1", "node2"}
        await backend.update_job(job_id, exclude_nodes=(), start_after=0)
        job = await wait_job(backend, job_id, lambda j: not j.excluded_nodes, "the exclusion to clear", timeout=20)
        assert job.state is JobState.PENDING
    finally:
        await backend.cancel(job_id)
    job = await wait_job(backend, job_id, lambda j: j.state is JobState.CANCELLED, "CANCELLED", timeout=30)
    assert job.state.terminal


async def test_requeue_running_job_keeps_its_id(backend: SlurmBackend, alice: JobUser) -> None:
    name = tag()
    job_id = await backend.submit(submit_args(alice, name=name, nodes=2))
    try:
        job = await wait_job(backend, job_id, lambda j: j.state is JobState.RUNNING, "RUNNING")
        assert job.user == "alice" and len(job.nodes) == 2 and set(job.nodes) <= {f"node{i}" for i in range(1, 7)}
        await backend.requeue(job_id)
        job = await wait_job(backend, job_id, lambda j: j.state is JobState.PENDING, "PENDING after requeue", 60)
        assert job.job_id == job_id and job.name == name and job.restart_count >= 1
    finally:
        await backend.cancel(job_id)


async def test_refused_submit_carries_slurms_words(backend: SlurmBackend, alice: JobUser) -> None:
    with pytest.raises(SlurmError) as info:
        await backend.submit(submit_args(alice, partition="no-such-partition", name="refused"))
    assert not isinstance(info.value, SlurmUnavailable)
    # The key line (sbatch: "invalid partition specified: NAME"; restd/pyslurm: Slurm's own words) leads.
    assert "invalid partition" in str(info.value).lower()
    assert "invalid partition" in info.value.detail.lower()


async def test_unreachable_slurm_is_unavailable(unreachable_backend: SlurmBackend) -> None:
    started = time.monotonic()
    with pytest.raises(SlurmUnavailable):
        await unreachable_backend.list_jobs()
    with pytest.raises(SlurmUnavailable):
        await unreachable_backend.list_nodes()
    assert time.monotonic() - started < 60


async def test_service_options_reach_slurm(backend: SlurmBackend, stack: Stack, alice: JobUser) -> None:
    """What the service adds to every job: the warning signal and the switch constraint."""
    args = submit_args(alice, nodes=2, signal=Signal("USR1", 60), switches=Switches(1, 30), hold=True)
    job_id = await backend.submit(args)
    try:
        env = {"PATH": stack.command_path(), "SLURM_CONF": stack.slurm_conf}
        shown = subprocess.run(
            ["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30, env=env, check=True
        )
        # sbatch keeps seconds; the scontrol update slurmrestd's submit needs rounds the wait up to minutes.
        assert re.search(r"Switches=1@00:0(0:30|1:00)\b", shown.stdout), shown.stdout
    finally:
        await backend.cancel(job_id)
