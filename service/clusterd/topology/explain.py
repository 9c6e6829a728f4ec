"""Human-readable reasons for a plan: what was chosen, what does not fit, what Slurm will do.

Kept apart from the planner so wording can change without touching the algorithm. Every
sentence names the concrete thing (a node, a switch, a count) the user can act on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from clusterctl.hostlist import compress_hostlist, natural_key
from clusterd.slurm.request import slurm_time
from clusterd.slurm.types import SlurmNode
from clusterd.topology.demand import PlacementRequest
from clusterd.topology.model import TopologyModel, could_fit, schedulable

if TYPE_CHECKING:
    from clusterd.topology.select import Selection


def plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n} {word}es" if word.endswith(("s", "sh", "ch", "x")) else f"{n} {word}s"


def _shape(request: PlacementRequest) -> str:
    parts = [plural(request.nodes, "node")]
    per = []
    if request.gpus_per_node:
        per.append(plural(request.gpus_per_node, "GPU"))
    if request.cpus_per_node:
        per.append(plural(request.cpus_per_node, "CPU"))
    if per:
        parts.append(f"x {' + '.join(per)}")
    if request.partition:
        parts.append(f"in partition {request.partition}")
    return " ".join(parts)


def _state_word(node: SlurmNode) -> str:
    flags = [f for f in node.flags if f.upper() in {"DRAIN", "DRAINING", "DRAINED", "NOT_RESPONDING", "FAIL"}]
    return node.state.value.lower() + "".join(f"+{f.lower()}" for f in flags)


def nodelist_problems(
    model: TopologyModel,
    wanted: Sequence[str],
    *,
    count: int,
    gpus: int,
    cpus: int,
    excluded: set[str],
    in_partition: Callable[[SlurmNode], bool],
) -> list[str]:
    """Why an explicit nodelist can never be honoured (empty when it can)."""
    if not wanted:
        return []
    problems: list[str] = []
    if len(wanted) > count:
        problems.append(f"nodelist names {len(wanted)} nodes but the job asks for {count}")
    unknown = [n for n in wanted if n not in model.nodes]
    if unknown:
        problems.append(f"nodelist has unknown nodes {compress_hostlist(unknown)}")
    known = [model.node(n) for n in wanted if n in model.nodes]
    clash = [n.name for n in known if n.name in excluded]
    if clash:
        problems.append(f"nodelist and exclude both name {compress_hostlist(clash)}")
    outside = [n.name for n in known if not in_partition(n)]
    if outside:
        problems.append(f"nodelist nodes {compress_hostlist(outside)} are not in the partition")
    for n in known:
        if not schedulable(n):
            problems.append(f"nodelist node {n.name} is {_state_word(n)}")
        elif not could_fit(n, gpus, cpus):
            problems.append(
                f"nodelist node {n.name} has {n.gpus_total} GPUs / {n.cpus_total} CPUs, "
                f"the job needs {gpus} / {cpus} per node"
            )
    leaves = list(dict.fromkeys(model.leaf_of(n.name) for n in known))
    if not problems and len(leaves) > 1 and model.lowest_common_switch(leaves) is None:
        problems.append(f"nodelist spans switches with no common fabric ({', '.join(leaves)})")
    return problems


def capacity_problems(
    request: PlacementRequest,
    part_nodes: Sequence[SlurmNode],
    pool: Sequence[SlurmNode],
    capable: set[str],
    excluded: set[str],
) -> list[str]:
    """Why the partition does not have enough nodes of the right size, even when empty."""
    g, c = request.gpus_per_node, request.cpus_per_node
    where = f"partition {request.partition}" if request.partition else "the cluster"
    if pool and g > max(n.gpus_total for n in pool):
        return [f"no usable node in {where} has {plural(g, 'GPU')} (most: {max(n.gpus_total for n in pool)})"]
    if pool and c > max(n.cpus_total for n in pool):
        return [f"no usable node in {where} has {plural(c, 'CPU')} (most: {max(n.cpus_total for n in pool)})"]
    down = [n for n in part_nodes if not schedulable(n)]
    excl = [n for n in part_nodes if n.name in excluded]
    detail = []
    if down:
        detail.append(f"{len(down)} down/draining/drained")
    if excl:
        detail.append(f"{len(excl)} excluded")
    small = len(pool) - len(capable)
    if small:
        detail.append(f"{small} too small")
    tail = f" ({', '.join(detail)} of {len(part_nodes)})" if detail else ""
    return [f"needs {plural(request.nodes, 'node')}; {where} has {len(capable)} that fit{tail}"]


def fabric_problem(model: TopologyModel, capable: set[str], count: int) -> str:
    """Enough nodes overall, but no single switch fabric holds them (Slurm cannot span)."""
    best = 0
    for root in model.roots:
        best = max(best, sum(1 for n in model.nodes_under(root) if n in capable))
    return f"needs {plural(count, 'node')} on one switch fabric; the largest fabric has {best} that fit"


def infeasible(request: PlacementRequest, reasons: Sequence[str]) -> str:
    return f"cannot place {_shape(request)}: " + "; ".join(reasons)


def _where(sel: Selection) -> str:
    leaves = ", ".join(sel.leaves)
    text = (
        f"{plural(len(sel.nodes), 'node')} on {leaves}: {plural(len(sel.leaves), 'switch')}, "
        f"{plural(sel.spine_levels, 'spine hop')}"
    )
    if len(sel.leaves) > 1 and sel.common_switch:
        text += f" (via {sel.common_switch})"
    return text


def _others(sel: Selection, free: Mapping[str, Sequence[str]], need: int) -> list[str]:
    """Context: the leaves not chosen that were too small, and the big ones kept whole."""
    rest = [(len(free[x]), x) for x in free if x not in sel.leaves and free[x]]
    small = sorted((r for r in rest if r[0] < need), key=lambda r: (-r[0], natural_key(r[1])))[:2]
    big = sorted((r for r in rest if r[0] >= need), key=lambda r: (-r[0], natural_key(r[1])))[:1]
    notes = [f"{x} has {plural(n, 'free node')}" for n, x in small]
    notes += [f"{x} ({n} free) left for larger jobs" for n, x in big]
    return notes


def feasible(
    model: TopologyModel,
    request: PlacementRequest,
    *,
    best: Selection | None,
    available: bool,
    limit: int | None,
    min_switches: int,
    free: Mapping[str, Sequence[str]],
    required_now: bool,
    busy_required: Sequence[str] = (),
) -> str:
    """The sentence for a feasible request, available now or not."""

    count = request.nodes
    wait = slurm_time(request.max_wait_seconds)
    parts: list[str] = []
    if best is not None and available:
        parts.append(_where(best))
        parts.extend(_others(best, free, count))
    elif not required_now:
        parts.append(
            f"nodelist nodes are busy now ({compress_hostlist(busy_required)}); the job queues until they free"
        )
    elif best is None:
        total = sum(len(v) for v in free.values())
        parts.append(f"only {total} of {count} nodes free now for {_shape(request)}; the job queues")
    else:  # a placement exists now, but on more leaves than the policy allows
        largest = min(free, key=lambda x: (-len(free[x]), natural_key(x)), default="")
        within = "no leaf switch has" if (limit or 1) == 1 else f"no {limit} leaf switches together have"
        parts.append(f"{within} {count} free nodes now (largest: {largest} with {len(free.get(largest, ()))})")
        parts.append(
            f"Slurm holds the job up to {wait} for {plural(limit or 1, 'switch')}, then places it "
            f"anyway; now that would be {_where(best)}"
        )
    if count > 1 and limit is not None:
        if request.policy == "pack" and min_switches > 1:
            parts.append(
                f"pack: no leaf holds {count} nodes even when empty, so --switches asks for the minimum, {min_switches}"
            )
        parts.append(f"--switches={limit}@{wait}")
    if best is not None and available and not request.nodelist:
        parts.append("nodes are a forecast; Slurm picks the final ones")
    return "; ".join(parts)
