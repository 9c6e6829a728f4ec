"""Turn proto messages into what people read (rich tables, a tree) or scripts parse (JSON).

Everything here is pure: it takes messages from ``clusterctl.v1`` and returns renderables or
strings, so the views are unit-tested without a server. User-controlled text (job names,
reasons) is wrapped in ``Text`` so that brackets in it are never taken as rich markup.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from clusterctl.v1 import cluster_pb2, jobs_pb2

_STATE_STYLE = {
    "PENDING": "yellow",
    "RUNNING": "green",
    "COMPLETING": "green",
    "COMPLETED": "bold green",
    "SUSPENDED": "magenta",
    "REQUEUED": "yellow",
}
_NODE_STYLE = {"IDLE": "green", "MIXED": "yellow", "ALLOCATED": "blue", "RESERVED": "magenta"}
_USABLE_NODE_STATES = (cluster_pb2.NODE_STATE_IDLE, cluster_pb2.NODE_STATE_MIXED)

# -- JSON --------------------------------------------------------------------------------------


def to_dict(message: Message) -> dict[str, Any]:
    """Proto -> dict with proto field names, every field present, int64 as numbers when safe.

    Printing fields at their default value keeps the shape stable for scripts (``terminal`` is
    there even when false).
    """
    return json_format.MessageToDict(
        message,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
        unquote_int64_if_possible=True,
    )


def dumps(data: Mapping[str, Any] | list[Any]) -> str:
    """One JSON document on one line (so ``watch --json`` is valid JSON lines)."""
    return json.dumps(data, separators=(",", ":"), sort_keys=False)


def print_json(data: Mapping[str, Any] | list[Any]) -> None:
    """Write one line of JSON to stdout and flush, so a pipe reader sees each event at once."""
    sys.stdout.write(dumps(data) + "\n")
    sys.stdout.flush()


def console(*, stderr: bool = False) -> Console:
    """The stdout (or stderr) console; rich honours COLUMNS and NO_COLOR, and drops styles when piped."""
    return Console(highlight=False, stderr=stderr)


# -- small helpers -----------------------------------------------------------------------------


def job_state(state: int) -> str:
    """``JOB_STATE_RUNNING`` -> ``RUNNING`` (unknown numbers from a newer server stay readable)."""
    try:
        return jobs_pb2.JobState.Name(state).removeprefix("JOB_STATE_")
    except ValueError:
        return f"STATE_{state}"


def node_state(state: int) -> str:
    try:
        return cluster_pb2.NodeState.Name(state).removeprefix("NODE_STATE_")
    except ValueError:
        return f"STATE_{state}"


def cause_name(cause: int) -> str:
    try:
        return jobs_pb2.TerminationCause.Name(cause).removeprefix("TERMINATION_CAUSE_")
    except ValueError:
        return f"CAUSE_{cause}"


def event_type(kind: int) -> str:
    try:
        return jobs_pb2.JobEventType.Name(kind).removeprefix("JOB_EVENT_TYPE_")
    except ValueError:
        return f"EVENT_{kind}"


# squeue/sacct's short state codes (``squeue -t PD``, ``sacct -s CD``).
SHORT_STATES = {
    "PD": "PENDING",
    "R": "RUNNING",
    "S": "SUSPENDED",
    "CG": "COMPLETING",
    "CD": "COMPLETED",
    "F": "FAILED",
    "CA": "CANCELLED",
    "TO": "TIMEOUT",
    "NF": "NODE_FAIL",
    "PR": "PREEMPTED",
    "OOM": "OUT_OF_MEMORY",
    "RQ": "REQUEUED",
    "BF": "BOOT_FAIL",
    "DL": "DEADLINE",
}


def short_state(state: int) -> str:
    """squeue's ST column: ``PD``, ``R``, ``CD``... (the long name where Slurm has no short one)."""
    name = job_state(state)
    return next((short for short, long in SHORT_STATES.items() if long == name), name)


def parse_job_state(text: str) -> int:
    """``running``/``RUNNING``/``JOB_STATE_RUNNING``/Slurm's ``R`` -> the enum number; ValueError otherwise."""
    name = text.strip().upper().replace("-", "_")
    name = SHORT_STATES.get(name, name)
    if not name.startswith("JOB_STATE_"):
        name = "JOB_STATE_" + name
    try:
        return jobs_pb2.JobState.Value(name)
    except ValueError:
        choices = ", ".join(
            v.name.removeprefix("JOB_STATE_").lower()
            for v in jobs_pb2.JobState.DESCRIPTOR.values
            if not v.name.endswith("UNSPECIFIED")
        )
        raise ValueError(f"unknown job state {text!r} (choose from {choices})") from None


def timestamp(ts: Timestamp) -> str:
    """Local time, or '-' for an unset timestamp."""
    if not ts.seconds and not ts.nanos:
        return "-"
    return datetime.fromtimestamp(ts.seconds).strftime("%Y-%m-%d %H:%M:%S")


def _is_set(ts: Timestamp) -> bool:
    return bool(ts.seconds or ts.nanos)


def slurm_duration(seconds: int) -> str:
    """Seconds as Slurm prints times: ``HH:MM:SS``, or ``D-HH:MM:SS`` from a day on."""
    days, rest = divmod(max(seconds, 0), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def elapsed(job: jobs_pb2.JobStatus, *, now: float | None = None) -> str:
    """Run time of the current (or last) run: start to end, or to ``now`` while it runs; '-' before."""
    if not _is_set(job.start_time):
        return "-"
    if _is_set(job.end_time) and job.end_time.seconds >= job.start_time.seconds:
        end = job.end_time.seconds
    elif job.terminal:
        return "-"
    else:
        end = int(time.time() if now is None else now)
    return slurm_duration(end - job.start_time.seconds)


def styled_state(name: str) -> Text:
    return Text(name, style=_STATE_STYLE.get(name, "red"))


def _nodes_text(nodes: Iterable[str]) -> str:
    names = list(nodes)
    return ",".join(names) if names else "-"


def _step(step: int) -> str:
    return "-" if step < 0 else str(step)


# -- jobs --------------------------------------------------------------------------------------


def jobs_table(jobs: Iterable[jobs_pb2.JobStatus], *, title: str | None = None) -> Table:
    """The ``list`` and ``watch`` table: one row per job, newest information wins."""
    table = Table(title=title, show_edge=False, header_style="bold")
    for column in ("JOBID", "NAME", "USER", "STATE", "NODES", "RESTARTS", "REASON"):
        table.add_column(column, no_wrap=column not in ("NAME", "NODES", "REASON"))
    for job in jobs:
        state = job_state(job.state)
        reason = job.final_reason if job.terminal and job.final_reason else job.reason
        table.add_row(
            Text(job.job_id),
            Text(job.name),
            Text(job.user),
            styled_state(state),
            Text(_nodes_text(job.nodes)),
            Text(str(job.restart_count)),
            Text(reason or "-"),
        )
    return table


def job_detail(job: jobs_pb2.JobStatus, *, now: float | None = None) -> RenderableType:
    """``status``: every field a user asks about when a job misbehaves, restarts included.

    "Submitted" is the first submission (a requeue moves ``submit_time``, shown as "Requeued");
    the exit code appears only when the job has one. ``now`` (default: the clock) ends the
    elapsed time of a job still running.
    """
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    state = styled_state(job_state(job.state))
    if job.terminal:
        state.append("  (terminal)", style="dim")
    first_submit = job.original_submit_time if _is_set(job.original_submit_time) else job.submit_time
    rows: list[tuple[str, Text | str]] = [
        ("Job", job.job_id),
        ("Name", job.name or "-"),
        ("User", job.user or "-"),
        ("State", state),
        ("Reason", job.reason or "-"),
        ("Partition", job.partition or "-"),
        ("Nodes", _nodes_text(job.nodes)),
        ("Excluded", _nodes_text(job.excluded_nodes)),
        ("Restarts", str(job.restart_count)),
    ]
    if job.stragglers:
        slow = ", ".join(f"{s.node} ({s.ratio:.2f}x)" for s in job.stragglers)
        rows.append(("Stragglers", Text(slow, style="yellow")))
    if job.has_exit_code:
        rows.append(("Exit code", f"{job.exit_code}" + (f" (signal {job.exit_signal})" if job.exit_signal else "")))
    rows += [
        ("Checkpoint", _step(job.checkpoint_step)),
        ("Submitted", timestamp(first_submit)),
    ]
    if job.spec.checkpoint_tier:
        rows.insert(-1, ("Checkpoint tier", job.spec.checkpoint_tier))
    if _is_set(job.submit_time) and job.submit_time != first_submit:
        rows.append(("Requeued", timestamp(job.submit_time)))
    rows += [
        ("Started", timestamp(job.start_time)),
        ("Ended", timestamp(job.end_time)),
        ("Elapsed", elapsed(job, now=now)),
        ("Time limit", slurm_duration(job.time_limit.seconds) if job.HasField("time_limit") else "partition default"),
        ("Workdir", job.working_directory or "-"),
        ("Output", job.stdout_path or "-"),
        ("Error", job.stderr_path or ("(with output)" if job.stdout_path else "-")),
        ("Placement", job.placement_explanation or "-"),
    ]
    if job.final_reason:
        rows.append(("Final reason", job.final_reason))
    if job.request_id:
        rows.append(("Request id", job.request_id))
    for label, value in rows:
        grid.add_row(label, value if isinstance(value, Text) else Text(value))
    parts: list[RenderableType] = [grid]
    if len(job.tasks) > 1:  # an array (one task asked for by ID_TASK is the job itself)
        grid.add_row("Array", Text(job.array))
        parts += [Text(""), tasks_table(job)]
    if not job.restarts:
        return Group(*parts) if len(parts) > 1 else grid
    restarts = Table(title="Restart history", title_justify="left", show_edge=False, header_style="bold")
    for column in ("#", "TIME", "CAUSE", "NODES", "EXIT", "CKPT STEP", "DETAIL"):
        restarts.add_column(column)
    for i, rec in enumerate(job.restarts, 1):
        restarts.add_row(
            str(i),
            timestamp(rec.time),
            cause_name(rec.cause),
            Text(_nodes_text(rec.failed_nodes)),
            str(rec.exit_code),
            _step(rec.checkpoint_step),
            Text(rec.detail or "-"),
        )
    return Group(*parts, Text(""), restarts)


def tasks_table(job: jobs_pb2.JobStatus) -> Table:
    """The tasks of an array (``status ID``): one line per task, as squeue would show each."""
    table = Table(title="Array tasks", title_justify="left", show_edge=False, header_style="bold")
    for column in ("TASK", "STATE", "EXIT", "NODES", "RESTARTS"):
        table.add_column(column, no_wrap=column != "NODES")
    for task in job.tasks:
        code = "-"
        if task.has_exit_code:
            code = f"{task.exit_code}" + (f" (signal {task.exit_signal})" if task.exit_signal else "")
        table.add_row(
            f"{job.job_id}_{task.task_id}",
            styled_state(job_state(task.state)),
            code,
            Text(_nodes_text(task.nodes)),
            str(task.restart_count),
        )
    return table


def submitted(response: jobs_pb2.SubmitJobResponse) -> str:
    """What ``submit`` prints first, sbatch's own line, so wrappers that read it keep working."""
    return f"Submitted batch job {response.job.job_id}"


def submitted_details(response: jobs_pb2.SubmitJobResponse) -> Text:
    """``submit -v``'s view after that line: state and placement."""
    job = response.job
    text = Text()
    if response.duplicate:
        text.append("Already submitted with this request id\n", style="dim")
    text.append("State: ")
    text.append_text(styled_state(job_state(job.state)))
    if job.reason:
        text.append(f" ({job.reason})")
    if job.placement_explanation:
        text.append(f"\nPlacement: {job.placement_explanation}")
    return text


def event_line(event: jobs_pb2.JobEvent) -> Text:
    """One log line per event, for ``watch`` when stdout is not a terminal and ``submit --wait``."""
    job = event.job
    when = timestamp(event.time)
    when = when.split(" ", 1)[1] if " " in when else when
    text = Text(f"{when}  job {job.job_id}  {event_type(event.type).lower():<13} ")
    text.append_text(styled_state(job_state(job.state)))
    if job.nodes:
        text.append(f"  on {_nodes_text(job.nodes)}")
    detail = event.message or (job.final_reason if job.terminal else job.reason)
    if detail:
        text.append(f"  {detail}")
    return text


# -- cluster -----------------------------------------------------------------------------------


def _gpus_free(node: cluster_pb2.Node) -> int:
    """GPUs a new job could use now: none on a node that is down, draining or reserved."""
    if node.state not in _USABLE_NODE_STATES or any(f.upper().startswith("DRAIN") for f in node.flags):
        return 0
    return max(node.gpus_total - node.gpus_allocated, 0)


def _cpus_free(node: cluster_pb2.Node) -> int:
    if node.state not in _USABLE_NODE_STATES or any(f.upper().startswith("DRAIN") for f in node.flags):
        return 0
    return max(node.cpus_total - node.cpus_allocated, 0)


def _node_state_text(node: cluster_pb2.Node) -> Text:
    name = node_state(node.state)
    label = (name + "".join(f"+{f}" for f in node.flags)).lower()
    usable = node.state in _USABLE_NODE_STATES and not any(f.upper().startswith("DRAIN") for f in node.flags)
    return Text(label, style=_NODE_STYLE.get(name, "red") if usable else "red")


def nodes_table(nodes: Iterable[cluster_pb2.Node]) -> Table:
    """``nodes``: state, switch, free/total resources, Slurm's reason and clusterd's failure record per node."""
    nodes = list(nodes)
    health = any(node.health for node in nodes)
    table = Table(show_edge=False, header_style="bold")
    columns = ("NODE", "STATE", "SWITCH", "GPUS FREE", "CPUS FREE", "MEM FREE", "PARTITIONS", "REASON")
    for column in columns + (("HEALTH",) if health else ()):
        table.add_column(column, no_wrap=column not in ("REASON", "HEALTH"), overflow="fold")
    for node in nodes:
        table.add_row(
            Text(node.name),
            _node_state_text(node),
            Text(node.switch or "-"),
            f"{_gpus_free(node)}/{node.gpus_total}",
            f"{_cpus_free(node)}/{node.cpus_total}",
            f"{_mem(max(node.memory_mb_total - node.memory_mb_allocated, 0))}/{_mem(node.memory_mb_total)}",
            Text(",".join(node.partitions) or "-"),
            Text(node.reason or "-"),
            *([Text(node.health or "-", style="yellow" if node.health else "")] if health else []),
        )
    return table


def _mem(mb: int) -> str:
    """MB as people read node memory: 512M, 15.6G, 1024G."""
    return f"{mb}M" if mb < 1024 else f"{mb / 1024:.3g}G" if mb < 100 * 1024 else f"{mb // 1024}G"


def _switch_label(name: str, level: int | None, gpus: tuple[int, int], nodes: tuple[int, int]) -> Text:
    label = Text(name, style="bold")
    if level is not None:
        label.append(f" L{level}", style="dim")
    label.append(f"  gpus {gpus[0]}/{gpus[1]} free  nodes {nodes[0]}/{nodes[1]} free")
    return label


def _node_label(node: cluster_pb2.Node) -> Text:
    label = Text(node.name)
    label.append("  ")
    label.append_text(_node_state_text(node))
    label.append(f"  gpus {_gpus_free(node)}/{node.gpus_total}")
    label.append(f"  cpus {_cpus_free(node)}/{node.cpus_total}", style="dim")
    return label


def topology_tree(topo: cluster_pb2.Topology, *, title: str = "cluster") -> Tree:
    """``topology``: switches (free/total GPUs and free nodes below each) down to nodes.

    Works from the proto alone. Roots come from ``roots``, or are the switches nobody lists as a
    child when the server sent none; nodes no switch claims go under "(no switch)" so that a
    cluster without topology/tree still shows every node.
    """
    switches = {s.name: s for s in topo.switches}
    nodes = {n.name: n for n in topo.nodes}
    children = {kid for s in topo.switches for kid in s.switches}
    roots = [r for r in topo.roots if r in switches] or [s.name for s in topo.switches if s.name not in children]
    total_gpus = (sum(switches[r].gpus_free for r in roots), sum(switches[r].gpus_total for r in roots))
    total_nodes = (sum(switches[r].nodes_free for r in roots), sum(switches[r].nodes_total for r in roots))
    placed: set[str] = set()
    loose = list(topo.nodes)
    if not roots:
        total_gpus = (sum(_gpus_free(n) for n in loose), sum(n.gpus_total for n in loose))
        total_nodes = (sum(1 for n in loose if _node_idle(n)), len(loose))
    tree = Tree(_switch_label(title, None, total_gpus, total_nodes))
    seen: set[str] = set()

    def add(parent: Tree, name: str) -> None:
        if name in seen:  # a malformed tree with a cycle must not recurse forever
            return
        seen.add(name)
        sw = switches[name]
        branch = parent.add(
            _switch_label(name, sw.level, (sw.gpus_free, sw.gpus_total), (sw.nodes_free, sw.nodes_total))
        )
        for kid in sw.switches:
            if kid in switches:
                add(branch, kid)
        for node_name in sw.nodes:
            placed.add(node_name)
            node = nodes.get(node_name)
            branch.add(_node_label(node) if node else Text(f"{node_name}  (no details)", style="dim"))

    for root in roots:
        add(tree, root)
    unplaced = [n for n in topo.nodes if n.name not in placed]
    if unplaced:
        branch = tree.add(Text("(no switch)", style="dim")) if roots else tree
        for node in unplaced:
            branch.add(_node_label(node))
    return tree


def _node_idle(node: cluster_pb2.Node) -> bool:
    return node.state == cluster_pb2.NODE_STATE_IDLE and not node.flags


def placement(plan: cluster_pb2.Placement) -> RenderableType:
    """``plan``: whether the request fits, where, and the sbatch arguments it turns into."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    feasible = Text("yes", style="green") if plan.feasible else Text("no", style="red")
    now = Text("yes", style="green") if plan.available_now else Text("no (would wait)", style="yellow")
    grid.add_row("Feasible", feasible)
    grid.add_row("Available now", now)
    grid.add_row("Nodes", Text(_nodes_text(plan.nodes)))
    grid.add_row("Switches", Text(_nodes_text(plan.switches)))
    grid.add_row("Spine hops", str(plan.spine_hops))
    grid.add_row("Explanation", Text(plan.explanation or "-"))
    grid.add_row("sbatch args", Text(" ".join(plan.sbatch_args) or "-"))
    return grid
