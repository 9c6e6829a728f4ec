"""Draw the topology as a rich tree for ``clusterctl topology``.

Each switch shows free/total GPUs and usable-idle/total nodes summed below it; each node shows
its state and free/total GPUs, so a user sees at a glance which leaf can take a job.
"""

from __future__ import annotations

from rich.text import Text
from rich.tree import Tree

from clusterd.slurm.types import NodeState
from clusterd.topology.model import SwitchStats, TopologyModel, schedulable

_STATE_STYLE = {
    NodeState.IDLE: "green",
    NodeState.MIXED: "yellow",
    NodeState.ALLOCATED: "blue",
}


def _switch_label(name: str, level: int | None, stats: SwitchStats) -> Text:
    label = Text(name, style="bold")
    if level is not None:
        label.append(f" L{level}", style="dim")
    label.append(
        f"  gpus {stats.gpus_free}/{stats.gpus_total} free"
        f"  nodes {stats.nodes_idle} idle, {stats.nodes_usable} usable/{stats.nodes_total}"
    )
    return label


def _node_label(model: TopologyModel, name: str) -> Text:
    node = model.node(name)
    ok = schedulable(node)
    state = node.state.value.lower() + "".join(f"+{f.lower()}" for f in node.flags)
    label = Text(name)
    label.append(f"  {state}", style=_STATE_STYLE.get(node.state, "red") if ok else "red")
    label.append(f"  gpus {node.gpus_free if ok else 0}/{node.gpus_total}")
    label.append(f"  cpus {node.cpus_free if ok else 0}/{node.cpus_total}", style="dim")
    return label


def render_tree(model: TopologyModel, *, show_nodes: bool = True, title: str = "cluster") -> Tree:
    """A rich Tree: root label with cluster totals, then switches, then (optionally) nodes."""
    total = SwitchStats()
    for root in model.roots:
        total = total + model.stats(root)
    tree = Tree(_switch_label(title, None, total))

    def add(parent: Tree, switch: str) -> None:
        branch = parent.add(_switch_label(switch, model.level(switch), model.stats(switch)))
        for kid in model.children(switch):
            add(branch, kid)
        if show_nodes:
            for node in model.leaf_nodes(switch):
                branch.add(_node_label(model, node))

    for root in model.roots:
        add(tree, root)
    return tree
