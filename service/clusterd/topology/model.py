"""The switch tree over the nodes, with free GPUs/CPUs per node and per switch.

Built from two Slurm reads (``scontrol show topology`` and the node list), never from Slurm
directly. The tree structure is computed once and shared; node states are swapped in by
:meth:`TopologyModel.with_nodes` / :meth:`with_allocation` so a poller (or the benchmark) can
refresh states without rebuilding the tree.

What can go wrong, and what we do:

* No topology configured (``TopologyPlugin=topology/flat``): there are no switches; every node
  goes under one implicit leaf, :data:`IMPLICIT_LEAF`, and placement degenerates to node choice.
* A node the topology does not mention: Slurm requires every node under a switch, but a partly
  written topology.conf happens; such nodes also land under :data:`IMPLICIT_LEAF`, which has no
  parent, so they are never combined with switched nodes (Slurm cannot span disjoint fabrics).
* A node under two leaves: kept under the first leaf printed.
* A switch named as a child but never described: ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from clusterctl.hostlist import natural_key
from clusterd.slurm.types import NodeState, SlurmNode, SlurmSwitch

IMPLICIT_LEAF = "(unswitched)"

# Extra state flags (sinfo --json "state_flags", or the "+DRAIN" of "IDLE+DRAIN") that take a
# node out of scheduling even when its base state is IDLE/MIXED/ALLOCATED.
UNSCHEDULABLE_FLAGS = frozenset(
    {
        "DRAIN",
        "DRAINING",
        "DRAINED",
        "DOWN",
        "FAIL",
        "FAILING",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "POWER_DOWN",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "MAINTENANCE",
        "MAINT",
        "INVALID",
        "INVALID_REG",
    }
)


_USABLE_STATES = frozenset(s for s in NodeState if s.usable)


def schedulable(node: SlurmNode) -> bool:
    """Whether Slurm may start new work on ``node`` (not down, draining, drained, failing)."""
    if node.state not in _USABLE_STATES:
        return False
    return not node.flags or not any(flag.upper() in UNSCHEDULABLE_FLAGS for flag in node.flags)


def fits(node: SlurmNode, gpus_per_node: int, cpus_per_node: int) -> bool:
    """Whether a request's per-node share fits on ``node`` right now."""
    return schedulable(node) and node.gpus_free >= gpus_per_node and node.cpus_free >= cpus_per_node


def could_fit(node: SlurmNode, gpus_per_node: int, cpus_per_node: int) -> bool:
    """Whether the share would fit on ``node`` if everything on it finished (feasibility)."""
    return schedulable(node) and node.gpus_total >= gpus_per_node and node.cpus_total >= cpus_per_node


@dataclass(frozen=True)
class SwitchStats:
    """Totals over every node below a switch (or on one node)."""

    nodes_total: int = 0
    nodes_usable: int = 0  # schedulable: not down/draining/drained
    nodes_idle: int = 0  # schedulable and nothing allocated
    gpus_total: int = 0
    gpus_free: int = 0  # on schedulable nodes only: a DOWN node's GPUs are not free
    cpus_total: int = 0
    cpus_free: int = 0

    def __add__(self, other: SwitchStats) -> SwitchStats:
        return SwitchStats(
            self.nodes_total + other.nodes_total,
            self.nodes_usable + other.nodes_usable,
            self.nodes_idle + other.nodes_idle,
            self.gpus_total + other.gpus_total,
            self.gpus_free + other.gpus_free,
            self.cpus_total + other.cpus_total,
            self.cpus_free + other.cpus_free,
        )

    @staticmethod
    def of_node(node: SlurmNode) -> SwitchStats:
        ok = schedulable(node)
        idle = ok and node.gpus_allocated == 0 and node.cpus_allocated == 0
        return SwitchStats(
            nodes_total=1,
            nodes_usable=int(ok),
            nodes_idle=int(idle),
            gpus_total=node.gpus_total,
            gpus_free=node.gpus_free if ok else 0,
            cpus_total=node.cpus_total,
            cpus_free=node.cpus_free if ok else 0,
        )


@dataclass(frozen=True)
class _Tree:
    """Structure only (no node states), shared between model generations."""

    switches: dict[str, SlurmSwitch]
    parent: dict[str, str | None]
    children: dict[str, tuple[str, ...]]
    depth: dict[str, int]  # links from the root
    leaves: tuple[str, ...]
    leaf_nodes: dict[str, tuple[str, ...]]
    leaf_of: dict[str, str]
    roots: tuple[str, ...]
    leaves_under: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _build_tree(switches: list[SlurmSwitch], node_names: Iterable[str]) -> _Tree:
    by_name = {s.name: s for s in switches}
    parent: dict[str, str | None] = {s.name: None for s in switches}
    children: dict[str, tuple[str, ...]] = {}
    for s in switches:
        kids = tuple(k for k in s.switches if k in by_name and k != s.name)
        children[s.name] = kids
        for kid in kids:
            if parent[kid] is None:
                parent[kid] = s.name

    known = set(node_names)
    leaf_of: dict[str, str] = {}
    leaf_nodes: dict[str, list[str]] = {}
    for s in switches:
        # Slurm lists every node below an upper switch too ("Nodes=node[1-6] Switches=leaf[1-2]"):
        # only a switch without child switches is a leaf.
        if not s.nodes or children[s.name]:
            continue
        members = leaf_nodes.setdefault(s.name, [])
        for n in s.nodes:
            if n in known and n not in leaf_of:
                leaf_of[n] = s.name
                members.append(n)
    unswitched = [n for n in known if n not in leaf_of]
    if unswitched:
        by_name[IMPLICIT_LEAF] = SlurmSwitch(name=IMPLICIT_LEAF, level=0, nodes=tuple(unswitched))
        parent[IMPLICIT_LEAF] = None
        children[IMPLICIT_LEAF] = ()
        leaf_nodes[IMPLICIT_LEAF] = unswitched
        for n in unswitched:
            leaf_of[n] = IMPLICIT_LEAF

    # Roots in printed order; a cycle (malformed input) has no root and is cut open at its first
    # switch so that every switch still hangs somewhere.
    roots = [name for name in by_name if parent[name] is None]
    depth: dict[str, int] = {}
    leaves_under: dict[str, list[str]] = {name: [] for name in by_name}

    def walk(name: str, d: int) -> None:
        depth[name] = d
        if name in leaf_nodes:
            node = name
            while node is not None:
                leaves_under[node].append(name)
                node = parent[node]  # type: ignore[assignment]
        for kid in children[name]:
            if kid not in depth and parent[kid] == name:
                walk(kid, d + 1)

    for r in roots:
        walk(r, 0)
    for name in by_name:
        if name not in depth:
            parent[name] = None
            roots.append(name)
            walk(name, 0)

    return _Tree(
        switches=by_name,
        parent=parent,
        children=children,
        depth=depth,
        leaves=tuple(name for name in by_name if name in leaf_nodes),
        leaf_nodes={k: tuple(sorted(v, key=natural_key)) for k, v in leaf_nodes.items()},
        leaf_of=leaf_of,
        roots=tuple(roots),
        leaves_under={k: tuple(v) for k, v in leaves_under.items()},
    )


class TopologyModel:
    """A switch tree over nodes plus the nodes' current states. Immutable; cheap to re-state."""

    def __init__(self, tree: _Tree, nodes: Mapping[str, SlurmNode]) -> None:
        self._tree = tree
        self._nodes = dict(nodes)

    @classmethod
    def build(cls, switches: list[SlurmSwitch], nodes: list[SlurmNode]) -> TopologyModel:
        """Join ``scontrol show topology`` records with the node list.

        Nodes present in the topology but absent from ``nodes`` are left out (they cannot be
        planned without a state); nodes absent from the topology go under :data:`IMPLICIT_LEAF`.
        """
        by_name = {n.name: n for n in nodes}
        return cls(_build_tree(switches, by_name), by_name)

    # --- states -------------------------------------------------------------------------------

    def with_nodes(self, nodes: Iterable[SlurmNode]) -> TopologyModel:
        """The same tree with some node states replaced (names not in the tree are ignored)."""
        updated = dict(self._nodes)
        for n in nodes:
            if n.name in updated:
                updated[n.name] = n
        return TopologyModel(self._tree, updated)

    def with_allocation(
        self, names: Iterable[str], *, gpus_per_node: int, cpus_per_node: int, release: bool = False
    ) -> TopologyModel:
        """Optimistically apply (or, with ``release``, undo) a job's share on ``names``.

        Lets the service account for a job it just submitted before the next poll sees it, and
        lets the benchmark run a job stream without rebuilding the tree.
        """
        sign = -1 if release else 1
        changed = []
        for name in names:
            n = self._nodes[name]
            gpus = min(max(n.gpus_allocated + sign * gpus_per_node, 0), n.gpus_total)
            cpus = min(max(n.cpus_allocated + sign * cpus_per_node, 0), n.cpus_total)
            state = n.state
            if state.usable:
                if gpus == 0 and cpus == 0:
                    state = type(state).IDLE
                elif (n.gpus_total == 0 or gpus >= n.gpus_total) and cpus >= n.cpus_total:
                    state = type(state).ALLOCATED
                else:
                    state = type(state).MIXED
            changed.append(replace(n, gpus_allocated=gpus, cpus_allocated=cpus, state=state))
        return self.with_nodes(changed)

    @property
    def nodes(self) -> Mapping[str, SlurmNode]:
        return self._nodes

    def node(self, name: str) -> SlurmNode:
        return self._nodes[name]

    # --- structure ----------------------------------------------------------------------------

    @property
    def switch_names(self) -> tuple[str, ...]:
        return tuple(self._tree.switches)

    @property
    def roots(self) -> tuple[str, ...]:
        return self._tree.roots

    @property
    def leaves(self) -> tuple[str, ...]:
        return self._tree.leaves

    def switch(self, name: str) -> SlurmSwitch:
        return self._tree.switches[name]

    def level(self, name: str) -> int:
        return self._tree.switches[name].level

    def parent(self, name: str) -> str | None:
        return self._tree.parent[name]

    def children(self, name: str) -> tuple[str, ...]:
        """Child switches (in printed order) that hang under ``name`` in this tree."""
        return tuple(k for k in self._tree.children.get(name, ()) if self._tree.parent.get(k) == name)

    def depth(self, name: str) -> int:
        return self._tree.depth[name]

    def leaf_of(self, node: str) -> str:
        return self._tree.leaf_of[node]

    def leaf_nodes(self, leaf: str) -> tuple[str, ...]:
        """Nodes directly under a leaf switch, in natural name order."""
        return self._tree.leaf_nodes.get(leaf, ())

    def leaves_under(self, switch: str) -> tuple[str, ...]:
        return self._tree.leaves_under.get(switch, ())

    def nodes_under(self, switch: str) -> tuple[str, ...]:
        return tuple(n for leaf in self.leaves_under(switch) for n in self.leaf_nodes(leaf))

    def ancestors(self, switch: str) -> list[str]:
        """``switch`` itself, then its parent, up to its root."""
        chain = [switch]
        nxt = self._tree.parent[switch]
        while nxt is not None:
            chain.append(nxt)
            nxt = self._tree.parent[nxt]
        return chain

    def lowest_common_switch(self, switches: Iterable[str]) -> str | None:
        """The lowest switch above all of ``switches``; None when they sit on disjoint fabrics."""
        names = list(dict.fromkeys(switches))
        if not names:
            return None
        common = self.ancestors(names[0])
        for other in names[1:]:
            up = set(self.ancestors(other))
            common = [s for s in common if s in up]
            if not common:
                return None
        return common[0]

    def spine_levels(self, leaves: Iterable[str]) -> int | None:
        """Switch levels above the leaves that traffic between them climbs (0 for one leaf).

        None when the leaves share no switch (no path through the fabric at all).
        """
        names = list(dict.fromkeys(leaves))
        top = self.lowest_common_switch(names)
        if top is None:
            return None
        return max(self.depth(n) for n in names) - self.depth(top)

    def hops(self, leaf_a: str, leaf_b: str) -> int | None:
        """Switch-to-switch links on the path from one leaf to another (0 for the same leaf)."""
        top = self.lowest_common_switch([leaf_a, leaf_b])
        if top is None:
            return None
        return self.depth(leaf_a) + self.depth(leaf_b) - 2 * self.depth(top)

    # --- sums ---------------------------------------------------------------------------------

    @cached_property
    def _stats(self) -> dict[str, SwitchStats]:
        out: dict[str, SwitchStats] = {}
        for leaf in self.leaves:
            # Plain integer sums: this runs once per model generation over every node.
            nt = nu = ni = gt = gf = ct = cf = 0
            for name in self.leaf_nodes(leaf):
                n = self._nodes[name]
                nt += 1
                gt += n.gpus_total
                ct += n.cpus_total
                if schedulable(n):
                    nu += 1
                    gf += n.gpus_free
                    cf += n.cpus_free
                    ni += n.gpus_allocated == 0 and n.cpus_allocated == 0
            out[leaf] = SwitchStats(nt, nu, ni, gt, gf, ct, cf)
        for name in self._tree.switches:
            if name in out:
                continue
            total = SwitchStats()
            for leaf in self.leaves_under(name):
                total = total + out[leaf]
            out[name] = total
        return out

    def stats(self, switch: str) -> SwitchStats:
        """Totals below ``switch`` (a leaf's own nodes, or every leaf under a higher switch)."""
        return self._stats[switch]

    def node_stats(self, node: str) -> SwitchStats:
        return SwitchStats.of_node(self._nodes[node])

    def free_nodes(self, switch: str, *, gpus_per_node: int = 0, cpus_per_node: int = 0) -> int:
        """Nodes below ``switch`` that can take a per-node share of this size right now."""
        return sum(1 for n in self.nodes_under(switch) if fits(self._nodes[n], gpus_per_node, cpus_per_node))
