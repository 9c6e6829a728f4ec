"""Domain objects -> protobuf messages (the only place that knows both)."""

from __future__ import annotations

from typing import cast

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.api.spec_convert import spec_to_proto
from clusterd.goodput.report import GoodputReport
from clusterd.liveness.claims import BeatClaim, BeatReply
from clusterd.slurm.request import parse_time_limit
from clusterd.slurm.types import JobState, NodeState, SlurmNode
from clusterd.store.records import ArrayTask, JobRecord
from clusterd.supervisor import array_view
from clusterd.supervisor.events import JobEvent

# RestartEntry.phases keys, each shown as RestartRecord.<phase>_at.
_PHASES = ("failed", "detected", "requeued", "relaunched", "running", "first_step")


def _ts(value: float | None) -> Timestamp | None:
    if not value:
        return None
    ts = Timestamp()
    ts.FromNanoseconds(int(value * 1e9))
    return ts


def job_state(state: JobState) -> jobs_pb2.JobState:
    return cast(jobs_pb2.JobState, jobs_pb2.JobState.Value(f"JOB_STATE_{state.value}"))


def job_state_from_proto(value: int) -> JobState:
    """Proto enum -> domain enum; unknown or unspecified values become UNKNOWN."""
    name = jobs_pb2.JobState.Name(value) if value in jobs_pb2.JobState.values() else "JOB_STATE_UNKNOWN"
    try:
        return JobState(name.removeprefix("JOB_STATE_"))
    except ValueError:
        return JobState.UNKNOWN


def node_state(state: NodeState) -> cluster_pb2.NodeState:
    return cast(cluster_pb2.NodeState, cluster_pb2.NodeState.Value(f"NODE_STATE_{state.value}"))


def job_status(rec: JobRecord, *, with_spec: bool = False) -> jobs_pb2.JobStatus:
    msg = jobs_pb2.JobStatus(
        job_id=rec.job_id,
        name=rec.name or rec.spec.name,
        user=rec.user,
        state=job_state(rec.state),
        reason=rec.reason,
        nodes=list(rec.nodes),
        restart_count=rec.restart_count,
        exit_code=rec.exit_code,
        exit_signal=rec.exit_signal,
        placement_explanation=rec.placement_explanation,
        partition=rec.partition,
        request_id=rec.request_id,
        terminal=rec.terminal,
        final_reason=rec.final_reason,
        checkpoint_step=rec.checkpoint_step,
        excluded_nodes=list(rec.excluded_nodes),
    )
    for name, value in (("submit_time", rec.submit_time), ("start_time", rec.start_time), ("end_time", rec.end_time)):
        ts = _ts(value)
        if ts is not None:
            getattr(msg, name).CopyFrom(ts)
    for entry in rec.restarts:
        r = msg.restarts.add(
            cause=f"TERMINATION_CAUSE_{entry.cause.value}",
            failed_nodes=list(entry.failed_nodes),
            checkpoint_step=entry.checkpoint_step,
            exit_code=entry.exit_code,
            detail=entry.detail,
            nodes_before=entry.nodes_before,
            nodes_after=entry.nodes_after,
            detected_by=entry.detected_by,
        )
        ts = _ts(entry.time)
        if ts is not None:
            r.time.CopyFrom(ts)
        for phase, when in entry.phases.items():
            ts = _ts(when)
            if ts is not None and phase in _PHASES:
                getattr(r, f"{phase}_at").CopyFrom(ts)
    _sbatch_view(msg, rec)
    if rec.array:
        msg.array = rec.array
        msg.tasks.extend(array_tasks(rec))
    if with_spec:
        msg.spec.CopyFrom(spec_to_proto(rec.spec))
    return msg


def array_tasks(rec: JobRecord) -> list[jobs_pb2.ArrayTask]:
    """Every task of an array record in task order; those Slurm has not started are PENDING."""
    out = []
    for i in sorted(set(array_view.indices(rec)) | set(rec.array_tasks)):
        task = rec.array_tasks.get(i) or ArrayTask()
        out.append(
            jobs_pb2.ArrayTask(
                task_id=i,
                state=job_state(task.state),
                exit_code=task.exit_code,
                exit_signal=task.exit_signal,
                nodes=list(task.nodes),
                has_exit_code=task.state.terminal,
                restart_count=task.restarts,
            )
        )
    return out


def task_status(rec: JobRecord, task_id: int, *, with_spec: bool = False) -> jobs_pb2.JobStatus:
    """One array task as its own status (``ID_TASK``): the array's record narrowed to that task."""
    msg = job_status(rec, with_spec=with_spec)
    (task,) = [t for t in msg.tasks if t.task_id == task_id] or [jobs_pb2.ArrayTask(task_id=task_id)]
    msg.job_id = f"{rec.job_id}_{task_id}"
    msg.state, msg.exit_code, msg.exit_signal = task.state, task.exit_code, task.exit_signal
    msg.has_exit_code, msg.restart_count = task.has_exit_code, task.restart_count
    msg.nodes[:] = list(task.nodes)
    if task.state != jobs_pb2.JOB_STATE_PENDING:
        msg.reason = ""
    del msg.tasks[:]
    msg.tasks.append(task)
    return msg


def expand_path(pattern: str, rec: JobRecord) -> str:
    """Slurm's filename patterns that one record can fill (%j %A %x %u %%); %a and others stay."""
    if not pattern or not rec.job_id:
        return pattern
    out, i = [], 0
    values = {"j": rec.job_id, "A": rec.job_id, "x": rec.name or rec.spec.name, "u": rec.user, "%": "%"}
    while i < len(pattern):
        if pattern[i] == "%" and i + 1 < len(pattern) and pattern[i + 1] in values:
            out.append(values[pattern[i + 1]])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def _sbatch_view(msg: jobs_pb2.JobStatus, rec: JobRecord) -> None:
    """What ``scontrol show job`` would show, from the resolved values the record's spec keeps."""
    spec = rec.spec
    # Slurm's submit time moves with each requeue; a job never requeued was first submitted then.
    requeued = rec.restarts or rec.restart_count or rec.acked_restarts
    ts = _ts(rec.created if requeued or not rec.submit_time else rec.submit_time)
    if ts is not None:
        msg.original_submit_time.CopyFrom(ts)
    if spec.time_limit:
        try:
            seconds = parse_time_limit(spec.time_limit)
        except ValueError:
            seconds = None
        if seconds is not None:
            msg.time_limit.CopyFrom(Duration(seconds=seconds))
    msg.working_directory = spec.working_directory
    msg.stdout_path = expand_path(spec.stdout_path, rec)
    msg.stderr_path = expand_path(spec.stderr_path, rec)
    msg.has_exit_code = rec.terminal and bool(rec.job_id) and not (rec.array and not rec.array_tasks)


def job_event(event: JobEvent) -> jobs_pb2.JobEvent:
    msg = jobs_pb2.JobEvent(
        type=f"JOB_EVENT_TYPE_{event.type.value}",
        job=job_status(event.record),
        message=event.message,
        resume_token=str(event.seq) if event.seq else "",
    )
    if event.previous_state is not None:
        msg.previous_state = job_state(event.previous_state)
    ts = _ts(event.time)
    if ts is not None:
        msg.time.CopyFrom(ts)
    return msg


def node(n: SlurmNode, switch: str) -> cluster_pb2.Node:
    return cluster_pb2.Node(
        name=n.name,
        state=node_state(n.state),
        switch=switch,
        cpus_total=n.cpus_total,
        cpus_allocated=n.cpus_allocated,
        gpus_total=n.gpus_total,
        gpus_allocated=n.gpus_allocated,
        memory_mb_total=n.memory_mb_total,
        memory_mb_allocated=n.memory_mb_allocated,
        partitions=list(n.partitions),
        features=list(n.features),
        reason=n.reason,
        flags=list(n.flags),
    )


def beat_claim(req: jobs_pb2.HeartbeatRequest) -> BeatClaim:
    """A rank's heartbeat, as the liveness service takes it (``stopping_step`` absent: not stopping)."""
    return BeatClaim(
        record_id=req.record_id,
        token=req.token,
        job_id=req.job_id,
        restart_count=req.restart_count,
        relaunch=req.relaunch,
        rank=req.rank,
        world_size=req.world_size,
        node=req.node,
        pid=req.pid,
        step=req.step,
        committed_step=req.committed_step,
        restored=req.restored,
        exiting=req.exiting,
        exit_code=req.exit_code,
        stopping_step=req.stopping_step if req.HasField("stopping_step") else None,
        step_seconds=req.step_seconds,
        stack=req.stack,
        save_stall=req.save_stall_seconds,
        saves=req.saves,
    )


def heartbeat_response(reply: BeatReply) -> jobs_pb2.HeartbeatResponse:
    msg = jobs_pb2.HeartbeatResponse(
        stop=reply.stop, stopping=reply.stopping, stop_step=reply.stop_step, want_stack=reply.want_stack
    )
    msg.interval.FromNanoseconds(int(reply.interval * 1e9))
    if reply.checkpoint_interval is not None:
        msg.checkpoint_interval.FromNanoseconds(int(reply.checkpoint_interval * 1e9))
    return msg


def goodput_response(job_id: str, report: GoodputReport) -> jobs_pb2.GetGoodputResponse:
    g = report.goodput
    msg = jobs_pb2.GetGoodputResponse(
        job_id=job_id, ettr=g.ettr, wall_seconds=g.wall_seconds, breakdown=jobs_pb2.GoodputBreakdown(**g.breakdown)
    )
    if report.checkpoint_interval is not None:
        msg.checkpoint_interval.FromNanoseconds(int(report.checkpoint_interval * 1e9))
    return msg
