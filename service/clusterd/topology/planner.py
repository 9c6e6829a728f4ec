"""Placement planner: where a multi-node job's collective traffic is cheapest, and why.

How the plan meets Slurm's own topology/tree enforcement
--------------------------------------------------------
Slurm (``TopologyPlugin=topology/tree``, ``select/cons_tres``) already places every job on the
lowest switch that can hold it, best-fit over the leaves below. We do not replace that scheduler;
the plan turns into sbatch options only where they add something Slurm would not do by itself:

* ``--switches=N@<max_wait>`` (policies ``pack`` and ``exact``, multi-node jobs only). Without it
  Slurm places a job on whatever is free *now*, spanning leaves when no leaf has room. With it
  Slurm holds the job until a placement on at most N leaf switches exists, for at most
  ``max_wait`` (capped by the site's ``SchedulerParameters=max_switch_wait``, 300 s by default),
  then places it anyway. ``pack`` asks for the fewest leaves the partition can give the job on an
  empty cluster (1 when any leaf is big enough; otherwise that minimum, so a 48-node job on
  32-node leaves packs onto 2 leaves instead of being refused). ``exact`` asks for the user's N
  and is infeasible when even an empty cluster needs more. ``any`` adds no switch option.
* ``--exclude=<hostlist>`` only for nodes the user excluded. DOWN, DRAINING and DRAINED nodes are
  never excluded explicitly: Slurm does not schedule on them, and a stale exclusion would keep a
  repaired node idle for the whole life of the job, requeues included.
* ``--nodelist=<hostlist>`` only when the user asked for explicit nodes. We never pin the nodes we
  chose: a pinned job waits for exactly those nodes, even when an equally good leaf frees up
  first, and Slurm's view of the queue (reservations, backfill, jobs submitted after our poll)
  is fresher than ours. The nodes in a plan are therefore a forecast — what Slurm's best-fit
  would most likely pick now — and the explanation says so.

So ``plan()`` decides *feasibility* (refuse up front what could never run, instead of a job
pending forever), the *switch constraint* to hand Slurm, and the *explanation*; Slurm decides
the final nodes.

Feasible vs available now
-------------------------
``feasible`` means the request could run on the partition's non-excluded, schedulable nodes if
everything on them finished; ``available_now`` means it could start on the current free
resources within its policy's switch limit. A request may be feasible but not available now
(it queues), never the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from clusterctl.hostlist import compress_hostlist, expand_hostlist
from clusterd.slurm.request import slurm_time
from clusterd.slurm.types import SlurmNode
from clusterd.topology import explain
from clusterd.topology.demand import POLICIES, PlacementRequest
from clusterd.topology.errors import HostlistError, InvalidPlacementRequest
from clusterd.topology.model import TopologyModel, could_fit, fits, schedulable
from clusterd.topology.select import Selection, min_leaf_count, select


@dataclass(frozen=True)
class Plan:
    """The planner's answer. ``sbatch_args`` holds only placement options (no -N, no --gres)."""

    feasible: bool
    available_now: bool
    nodes: list[str]
    switches: list[str]  # leaf switches of ``nodes``
    spine_hops: int  # switch levels above the leaves the traffic climbs; 0 for one leaf
    explanation: str
    sbatch_args: list[str] = field(default_factory=list)
    common_switch: str | None = None
    min_switches: int | None = None  # fewest leaves the job could ever use (empty cluster)
    switch_limit: int | None = None  # the N handed to --switches, if any
    exclude: tuple[str, ...] = ()  # what --exclude names (typed, for the job request)
    nodelist: tuple[str, ...] = ()  # what --nodelist names


def _names(entries: Iterable[str], what: str) -> list[str]:
    out: list[str] = []
    for entry in entries:
        try:
            out.extend(expand_hostlist(entry))
        except HostlistError as exc:
            raise InvalidPlacementRequest(f"{what}: {exc}") from exc
    return list(dict.fromkeys(out))


def validate(request: PlacementRequest) -> None:
    """Reject malformed requests (as opposed to infeasible ones, which get a Plan).

    Raises:
        InvalidPlacementRequest: naming the field that is wrong.
    """
    if request.nodes < 1:
        raise InvalidPlacementRequest(f"nodes must be at least 1, got {request.nodes}")
    if request.gpus_per_node < 0 or request.cpus_per_node < 0:
        raise InvalidPlacementRequest("gpus_per_node and cpus_per_node must not be negative")
    if request.policy not in POLICIES:
        raise InvalidPlacementRequest(f"policy must be one of {', '.join(POLICIES)}, got {request.policy!r}")
    if request.max_wait_seconds < 0:
        raise InvalidPlacementRequest("max_wait_seconds must not be negative")
    if request.policy == "exact" and (request.switch_count is None or request.switch_count < 1):
        raise InvalidPlacementRequest("policy 'exact' needs switch_count >= 1")


def _preference(node: SlurmNode) -> tuple[int, int]:
    """Partly used nodes first (best fit at node level); a stable sort keeps name order after."""
    return (node.gpus_free, node.cpus_free)


def _min_leaves(model: TopologyModel, capable: set[str], count: int, required: list[str]) -> int | None:
    """Fewest leaves the job could use if every capable node were free."""
    if not required:
        cap = {leaf: sum(1 for n in model.leaf_nodes(leaf) if n in capable) for leaf in model.leaves}
        return min_leaf_count(model, cap, count)
    free = {leaf: [n for n in model.leaf_nodes(leaf) if n in capable and n not in required] for leaf in model.leaves}
    sel = select(model, free, count, required=required)
    return None if sel is None else len(sel.leaves)


def plan(model: TopologyModel, request: PlacementRequest) -> Plan:
    """Plan ``request`` on ``model``: feasibility, the switch option, a forecast, the reasons.

    Never raises for a well-formed request; see :func:`validate` for what is malformed.
    """
    validate(request)
    count, g, c = request.nodes, request.gpus_per_node, request.cpus_per_node
    excluded = _names(request.exclude_nodes, "exclude_nodes")
    wanted = _names(request.nodelist, "nodelist")
    known_excluded = [n for n in excluded if n in model.nodes]
    excluded_set = set(excluded)

    def in_partition(node: SlurmNode) -> bool:
        return request.partition is None or request.partition in node.partitions

    def infeasible(reasons: list[str], min_switches: int | None = None) -> Plan:
        return Plan(
            feasible=False,
            available_now=False,
            nodes=[],
            switches=[],
            spine_hops=0,
            explanation=explain.infeasible(request, reasons),
            sbatch_args=[],
            min_switches=min_switches,
        )

    part_nodes = [n for n in model.nodes.values() if in_partition(n)]
    if not part_nodes:
        where = f"partition {request.partition!r}" if request.partition else "the cluster"
        return infeasible([f"{where} has no nodes"])

    reasons = explain.nodelist_problems(
        model, wanted, count=count, gpus=g, cpus=c, excluded=excluded_set, in_partition=in_partition
    )
    if reasons:
        return infeasible(reasons)

    pool = [n for n in part_nodes if n.name not in excluded_set and schedulable(n)]
    capable = {n.name for n in pool if could_fit(n, g, c)}
    if len(capable) < count:
        return infeasible(explain.capacity_problems(request, part_nodes, pool, capable, excluded_set))

    min_switches = _min_leaves(model, capable, count, wanted)
    if min_switches is None:
        return infeasible([explain.fabric_problem(model, capable, count)])

    limit: int | None = None
    if request.policy == "pack":
        limit = min_switches
    elif request.policy == "exact":
        assert request.switch_count is not None  # validate() checked
        limit = request.switch_count
        if min_switches > limit:
            return infeasible(
                [
                    f"{count} nodes need at least {min_switches} leaf switches even on an empty "
                    f"cluster; {limit} requested"
                ],
                min_switches,
            )

    args: list[str] = []
    if limit is not None and count > 1:
        args.append(f"--switches={limit}@{slurm_time(request.max_wait_seconds)}")
    if known_excluded:
        args.append(f"--exclude={compress_hostlist(known_excluded)}")
    if wanted:
        args.append(f"--nodelist={compress_hostlist(wanted)}")

    required_now = all(fits(model.node(n), g, c) for n in wanted)
    # ``capable`` already holds only schedulable, non-excluded partition nodes.
    wanted_set = set(wanted)
    free: dict[str, list[SlurmNode]] = {}
    for leaf in model.leaves:
        candidates = [model.node(n) for n in model.leaf_nodes(leaf) if n in capable and n not in wanted_set]
        free[leaf] = sorted((x for x in candidates if x.gpus_free >= g and x.cpus_free >= c), key=_preference)
    free_names = {leaf: [n.name for n in nodes] for leaf, nodes in free.items()}
    best: Selection | None = select(model, free_names, count, required=wanted) if required_now else None
    available = best is not None and (limit is None or count == 1 or len(best.leaves) <= limit)

    return Plan(
        feasible=True,
        available_now=available,
        nodes=list(best.nodes) if best else [],
        switches=list(best.leaves) if best else [],
        spine_hops=best.spine_levels if best else 0,
        explanation=explain.feasible(
            model,
            request,
            best=best,
            available=available,
            limit=limit,
            min_switches=min_switches,
            free=free_names,
            required_now=required_now,
            busy_required=[n for n in wanted if not fits(model.node(n), g, c)],
        ),
        sbatch_args=args,
        common_switch=best.common_switch if best else None,
        min_switches=min_switches,
        switch_limit=limit if count > 1 else None,
        exclude=tuple(known_excluded),
        nodelist=tuple(wanted),
    )
