"""Each backend variant against the running release: parsing of what it prints, and the job calls
the service makes (submit with GPUs and arrays, cancel, requeue with exclusion)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

from clusterd.errors import SlurmError
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.request import ArraySpec
from clusterd.slurm.restd import RestdBackend
from clusterd.slurm.types import JobState, NodeState
from clusterd.slurm.version import SlurmVersion
from tests.support.backends import JobUser, submit_args, tag, wait_job
from tests.support.stack import Stack
from tests.support.wait import wait_for

NODES = tuple(f"node{i}" for i in range(1, 7))


def output(user: JobUser, name: str) -> str:
    path = Path(user.job_dir) / name
    return wait_for(lambda: path.exists() and path.read_text(), timeout=20, what=f"{path}")  # type: ignore[no-any-return]


async def test_release_and_api_version(
    compat_backend: SlurmBackend, stack: Stack, offered_api_versions: frozenset[str]
) -> None:
    version = await compat_backend.version()
    assert version.startswith(stack.slurm_version + "."), version
    # The newest REST version a release serves is the one our table names for it.
    assert SlurmVersion.parse(version).data_parser == max(offered_api_versions) or stack.slurm_version == "22.05"
    if isinstance(compat_backend, RestdBackend):
        assert await compat_backend.api_version() in offered_api_versions


async def test_nodes_parse(compat_backend: SlurmBackend) -> None:
    nodes = {n.name: n for n in await compat_backend.list_nodes()}
    assert tuple(sorted(nodes)) == NODES
    for n in nodes.values():
        assert (n.cpus_total, n.gpus_total, n.memory_mb_total) == (4, 4, 2048), n
        assert {"debug", "batch"} <= set(n.partitions), n
        assert n.state in (NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED), n


async def test_topology_two_leaves(compat_backend: SlurmBackend) -> None:
    switches = {s.name: s for s in await compat_backend.topology()}
    assert switches["leaf1"].nodes == NODES[:3] and switches["leaf2"].nodes == NODES[3:]
    assert set(switches["spine"].switches) == {"leaf1", "leaf2"}
    assert switches["spine"].level > switches["leaf1"].level


async def test_gpu_job_queue_fields_and_output(compat_backend: SlurmBackend, alice: JobUser) -> None:
    name, comment = tag("compat"), tag("note")
    # The job runs until the test has looked at it (a fixed sleep is shorter than one squeue on a
    # loaded machine): it ends once the release file appears in its directory, or after 120 s.
    release = alice.job_dir / f"release-{name}"
    script = (
        "#!/bin/bash\nsrun bash -c 'echo GPUS=$CUDA_VISIBLE_DEVICES HOST=$(hostname)'\n"
        f"for _ in $(seq 600); do [ -e {release} ] && break; sleep 0.2; done\n"
    )
    args = submit_args(
        alice,
        script,
        name=name,
        comment=comment,
        partition="batch",
        nodes=2,
        tasks_per_node=1,
        cpus_per_task=1,
        gpus_per_node=2,
        memory_mb_per_node=200,
        stdout=f"{name}-%j.out",
    )
    job_id = await compat_backend.submit(args)
    try:
        job = await wait_job(compat_backend, job_id, lambda j: j.state is JobState.RUNNING, "RUNNING")
        assert (job.user, job.name, job.comment, job.partition) == ("alice", name, comment, "batch")
        assert len(job.nodes) == 2 and set(job.nodes) <= set(NODES) and job.batch_host in job.nodes
        assert job.requeue and job.start_time and job.submit_time and job.restart_count == 0
        busy = {n.name: n for n in await compat_backend.list_nodes() if n.name in job.nodes}
        assert all(n.gpus_allocated >= 2 and n.cpus_allocated >= 1 for n in busy.values()), busy
        release.touch()
        done = await wait_job(compat_backend, job_id, lambda j: j.state.terminal, "the end")
        assert (done.state, done.exit_code) == (JobState.COMPLETED, 0), done
        assert done.end_time and done.end_time >= (done.start_time or 0)
    finally:
        await compat_backend.cancel(job_id)
        release.unlink(missing_ok=True)
    lines = sorted(re.findall(r"GPUS=(\S*) HOST=(\S+)", output(alice, f"{name}-{job_id}.out")))
    assert [host for _, host in lines] == sorted(job.nodes)
    assert all(len(gpus.split(",")) == 2 for gpus, _ in lines), lines


async def test_failed_job_exit_code(compat_backend: SlurmBackend, alice: JobUser) -> None:
    job_id = await compat_backend.submit(submit_args(alice, "#!/bin/bash\nexit 3\n"))
    done = await wait_job(compat_backend, job_id, lambda j: j.state.terminal, "the end")
    assert (done.state, done.exit_code) == (JobState.FAILED, 3), done


async def test_array_tasks(compat_backend: SlurmBackend, alice: JobUser) -> None:
    name = tag("array")
    script = "#!/bin/bash\necho task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID\nsleep 1\n"
    args = submit_args(
        alice, script, name=name, array=ArraySpec((0, 1, 2, 3), max_running=2), stdout=f"{name}-%A_%a.out"
    )
    job_id = await compat_backend.submit(args)
    try:

        async def tasks() -> dict[int, JobState]:
            jobs = [j for j in await compat_backend.list_jobs() if j.array_job_id == job_id]
            return {j.array_task_id: j.state for j in jobs if j.array_task_id is not None}

        seen: dict[int, JobState] = {}
        for _ in range(180):
            seen = await tasks()
            if sorted(seen) == [0, 1, 2, 3] and all(s is JobState.COMPLETED for s in seen.values()):
                break
            await asyncio.sleep(0.5)
        assert seen == dict.fromkeys(range(4), JobState.COMPLETED), seen
    finally:
        await compat_backend.cancel(job_id)
    for task in range(4):
        assert f"task {task} of {job_id}" in output(alice, f"{name}-{job_id}_{task}.out")


async def test_cancel_pending(compat_backend: SlurmBackend, alice: JobUser) -> None:
    job_id = await compat_backend.submit(submit_args(alice, hold=True))
    job = await wait_job(compat_backend, job_id, lambda j: True, "the job to be listed", timeout=20)
    assert job.state is JobState.PENDING and job.reason
    await compat_backend.cancel(job_id)
    await wait_job(compat_backend, job_id, lambda j: j.state is JobState.CANCELLED, "CANCELLED", timeout=30)


async def test_requeue_with_exclusion(compat_backend: SlurmBackend, alice: JobUser) -> None:
    """What the supervisor does after a failure: requeue, exclude the node, start now."""
    job_id = await compat_backend.submit(submit_args(alice, nodes=1))
    try:
        job = await wait_job(compat_backend, job_id, lambda j: j.state is JobState.RUNNING, "RUNNING")
        first = job.nodes[0]
        await compat_backend.requeue(job_id)
        await wait_job(compat_backend, job_id, lambda j: j.state is JobState.PENDING, "PENDING after requeue", 60)
        # As the supervisor does: the requeue sets a fresh ~120 s BeginTime once the old allocation is
        # cleaned up, which may land after a first release, so the release is repeated until it runs.
        for _ in range(12):
            # Refused once the job has started since the last look ("no longer pending"): the
            # supervisor, too, takes a refusal as "look again at the next poll".
            with contextlib.suppress(SlurmError):
                await compat_backend.update_job(job_id, exclude_nodes=(first,), start_after=0)
            with contextlib.suppress(AssertionError):
                job = await wait_job(compat_backend, job_id, lambda j: j.state is JobState.RUNNING, "RUNNING", 5)
                break
        assert job.state is JobState.RUNNING and first not in job.nodes, job
        assert job.excluded_nodes == (first,) and job.restart_count >= 1, job
    finally:
        await compat_backend.cancel(job_id)


async def test_pending_reason_and_dependency(compat_backend: SlurmBackend, alice: JobUser) -> None:
    """A job held behind a dependency: listed PENDING with Slurm's reason, and cancellable."""
    first = await compat_backend.submit(submit_args(alice, hold=True))
    second = await compat_backend.submit(submit_args(alice, dependency=f"afterok:{first}"))
    try:
        job = await wait_job(
            compat_backend,
            second,
            lambda j: j.state is JobState.PENDING and bool(j.reason),
            "PENDING with a reason",
            timeout=30,
        )
        assert "Dependency" in job.reason, job.reason
    finally:
        await compat_backend.cancel(second)
        await compat_backend.cancel(first)
