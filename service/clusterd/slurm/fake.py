"""In-memory Slurm for fast unit tests of the service's logic (never for feature claims).

It implements :class:`~clusterd.slurm.base.SlurmBackend` and counts every call, so tests can prove
that a rejected request never reached Slurm and that N watchers cost one queue query per poll.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import dataclass, field, replace

from clusterd.errors import SlurmError
from clusterd.slurm.arrays import compress, task_indices
from clusterd.slurm.request import JobRequest
from clusterd.slurm.types import JobPoll, JobState, NodeState, SlurmJob, SlurmNode, SlurmSwitch


@dataclass
class FakeSlurm:
    name = "fake"  # a class attribute (no annotation): not a dataclass field
    nodes: list[SlurmNode] = field(default_factory=list)
    switches: list[SlurmSwitch] = field(default_factory=list)
    jobs: dict[str, SlurmJob] = field(default_factory=dict)
    submitted: list[JobRequest] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    fail_submit: str = ""  # when set, sbatch "refuses" with this message
    accounting: list[SlurmJob] | None = None  # finished jobs slurmdbd knows; None: no accounting
    held: set[str] = field(default_factory=set)
    admin_comments: dict[str, str] = field(default_factory=dict)
    no_kill: set[str] = field(default_factory=set)  # jobs submitted with --no-kill
    killed_steps_on: list[tuple[str, ...] | None] = field(default_factory=list)  # nodes of the steps killed
    partial: bool = False  # poll_jobs filters, as squeue from 24.11 on; False: the whole queue, as 22.05
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    @classmethod
    def cluster(cls, leaves: int = 2, per_leaf: int = 3, gpus: int = 4, cpus: int = 4) -> FakeSlurm:
        nodes, switches = [], []
        n = 0
        for leaf in range(1, leaves + 1):
            names = []
            for _ in range(per_leaf):
                n += 1
                names.append(f"node{n}")
                nodes.append(
                    SlurmNode(
                        f"node{n}",
                        NodeState.IDLE,
                        cpus_total=cpus,
                        gpus_total=gpus,
                        memory_mb_total=2048,
                        partitions=("debug", "batch"),
                    )
                )
            switches.append(SlurmSwitch(f"leaf{leaf}", 0, nodes=tuple(names)))
        switches.append(SlurmSwitch("spine", 1, switches=tuple(s.name for s in switches)))
        return cls(nodes=nodes, switches=switches)

    async def submit(self, request: JobRequest) -> str:
        self.calls["submit"] += 1
        if self.fail_submit:
            raise SlurmError("sbatch", 1, f"sbatch: error: {self.fail_submit}")
        job_id = str(next(self._ids))
        self.submitted.append(request)
        if request.no_kill:
            self.no_kill.add(job_id)
        self.jobs[job_id] = SlurmJob(
            job_id=job_id,
            name=request.name,
            user=request.user,
            state=JobState.PENDING,
            partition=request.partition or "debug",
            submit_time=time.time(),
            comment=request.comment,
            requeue=request.requeue,
            array_job_id=job_id if request.array else "",
            array_pending=request.array.render() if request.array else "",
        )
        return job_id

    def start_task(self, array_id: str, task: int, state: JobState = JobState.RUNNING, **changes: object) -> str:
        """Start one pending task of an array as squeue shows it: its own job id, out of the pending
        range; the last task takes the array's own id (as Slurm does). Returns the task's job id."""
        pending = self.jobs[array_id]
        left = [i for i in task_indices(pending.array_pending) if i != task]
        limit = pending.array_pending.partition("%")[2]
        job_id = array_id if not left else str(next(self._ids))
        if left:
            self.jobs[array_id] = replace(pending, array_pending=compress(left) + (f"%{limit}" if limit else ""))
        self.jobs[job_id] = replace(
            pending,
            job_id=job_id,
            array_task_id=task,
            array_pending="",
            state=state,
            **changes,  # type: ignore[arg-type]
        )
        return job_id

    def task(self, array_id: str, task: int) -> str:
        """The Slurm job id that array task ``array_id``_``task`` runs under now."""
        return next(j.job_id for j in self.jobs.values() if j.array_job_id == array_id and j.array_task_id == task)

    def _resolve(self, job_id: str) -> list[str]:
        """``A_T`` -> that task's job id; ``A`` -> every element of array A (or the plain job)."""
        parent, _, task = job_id.partition("_")
        if task:
            return [self.task(parent, int(task))]
        return [j.job_id for j in self.jobs.values() if j.array_job_id == parent] or [job_id]

    def set_state(self, job_id: str, state: JobState, **changes: object) -> None:
        self.jobs[job_id] = replace(self.jobs[job_id], state=state, **changes)  # type: ignore[arg-type]

    async def cancel(self, job_id: str) -> None:
        self.calls["cancel"] += 1
        parent, _, task = job_id.partition("_")
        pending = self.jobs.get(parent)
        if task and pending and int(task) in task_indices(pending.array_pending):
            # As 22.05: the task leaves the pending range and no element lists it; cancelling the last
            # one leaves the range's record CANCELLED with no tasks.
            left = [i for i in task_indices(pending.array_pending) if i != int(task)]
            limit = pending.array_pending.partition("%")[2]
            if left:
                self.jobs[parent] = replace(pending, array_pending=compress(left) + (f"%{limit}" if limit else ""))
            else:
                self.jobs[parent] = replace(pending, array_pending="", state=JobState.CANCELLED, end_time=time.time())
            return
        for one in self._resolve(job_id):
            if one in self.jobs:
                self.set_state(one, JobState.CANCELLED)

    async def requeue(self, job_id: str) -> None:
        self.calls["requeue"] += 1
        for one in self._resolve(job_id):
            job = self.jobs[one]
            self.jobs[one] = replace(job, state=JobState.PENDING, restart_count=job.restart_count + 1)

    async def steps_on(self, job_id: str, on_nodes: tuple[str, ...]) -> tuple[str, ...]:
        """One step per node: ``JOB.0@NODE``."""
        return tuple(f"{job_id}.0@{n}" for n in on_nodes)

    async def kill_steps(self, job_id: str, steps: tuple[str, ...] | None = None) -> None:
        self.calls["kill_steps"] += 1
        self.killed_steps_on.append(None if steps is None else tuple(s.partition("@")[2] for s in steps))
        # The batch script ends with its step (``exec srun``), unless it goes on (--no-kill: it relaunches).
        if job_id in self.jobs and self.jobs[job_id].state == JobState.RUNNING and job_id not in self.no_kill:
            self.jobs[job_id] = replace(self.jobs[job_id], state=JobState.FAILED, exit_code=137)

    async def drain_node(self, node: str, reason: str) -> None:
        self.calls["drain_node"] += 1
        self.nodes = [replace(n, state=NodeState.DRAINING, reason=reason) if n.name == node else n for n in self.nodes]

    async def set_node_down(self, node: str, reason: str) -> None:
        self.calls["set_node_down"] += 1
        self.nodes = [replace(n, state=NodeState.DOWN, reason=reason) if n.name == node else n for n in self.nodes]
        for job_id, job in list(self.jobs.items()):
            if job.state != JobState.RUNNING or node not in job.nodes:
                continue
            if job_id in self.no_kill and node != (job.batch_host or job.nodes[0]):
                # --no-kill: Slurm takes the node out of the job, which runs on ("Removing failed node")
                self.jobs[job_id] = replace(job, nodes=tuple(n for n in job.nodes if n != node))
            elif job.requeue:
                self.jobs[job_id] = replace(
                    job, state=JobState.PENDING, reason="BeginTime", nodes=(), restart_count=job.restart_count + 1
                )

    async def update_job(
        self, job_id: str, *, exclude_nodes: tuple[str, ...] | None = None, start_after: int | None = None
    ) -> None:
        self.calls["update_job"] += 1
        if exclude_nodes is not None:
            self.jobs[job_id] = replace(self.jobs[job_id], excluded_nodes=exclude_nodes)

    async def list_jobs(self) -> list[SlurmJob]:
        self.calls["list_jobs"] += 1
        return list(self.jobs.values())

    async def poll_jobs(self, focus: frozenset[str]) -> JobPoll:
        if not self.partial:
            return JobPoll(tuple(await self.list_jobs()))
        self.calls["poll_jobs"] += 1
        return JobPoll(
            tuple(
                j
                for j in self.jobs.values()
                if j.state != JobState.PENDING or j.job_id in focus or j.array_job_id in focus
            ),
            whole=False,
        )

    async def list_nodes(self) -> list[SlurmNode]:
        self.calls["list_nodes"] += 1
        return list(self.nodes)

    async def topology(self) -> list[SlurmSwitch]:
        self.calls["topology"] += 1
        return list(self.switches)

    async def partitions(self) -> list[str]:
        return sorted({p for n in self.nodes for p in n.partitions})

    async def version(self) -> str:
        return "22.05.8"

    async def hold(self, job_id: str, *, user: str = "") -> None:
        self.calls["hold"] += 1
        job = self.jobs.get(self.task(*_split(job_id)) if "_" in job_id else job_id)
        if job is None or job.state != JobState.PENDING:
            raise SlurmError("scontrol", 1, "scontrol: error: Job is no longer pending execution for job " + job_id)
        self.held.add(job_id)
        self.jobs[job.job_id] = replace(job, reason="JobHeldUser")

    async def release(self, job_id: str, *, user: str = "") -> None:
        self.calls["release"] += 1
        if job_id not in self.held:
            raise SlurmError("scontrol", 1, "scontrol: error: Job is not held for job " + job_id)
        self.held.discard(job_id)
        for one in self._resolve(job_id):
            self.jobs[one] = replace(self.jobs[one], reason="")

    async def mark_supervised(self, job_id: str, comment: str) -> None:
        self.calls["mark_supervised"] += 1
        self.jobs[job_id] = replace(self.jobs[job_id], comment=comment, requeue=True)

    async def set_admin_comment(self, job_id: str, note: str) -> None:
        self.calls["set_admin_comment"] += 1
        self.admin_comments[job_id] = note

    async def accounting_jobs(self, *, since: float, until: float, user: str | None) -> list[SlurmJob] | None:
        self.calls["accounting_jobs"] += 1
        if self.accounting is None:
            return None
        return [
            j
            for j in self.accounting
            if (user is None or j.user == user) and j.end_time is not None and since <= j.end_time < until
        ]


def _split(job_id: str) -> tuple[str, int]:
    parent, _, task = job_id.partition("_")
    return parent, int(task)
