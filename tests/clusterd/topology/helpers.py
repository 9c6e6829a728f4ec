"""Small hand-made trees for planner tests: say how many nodes per leaf are free or busy."""

from __future__ import annotations

from clusterd.slurm.types import NodeState, SlurmNode, SlurmSwitch
from clusterd.topology import TopologyModel


def tree(
    leaves: dict[str, tuple[str | None, int, int]],
    *,
    gpus: int = 8,
    cpus: int = 32,
    partitions: tuple[str, ...] = ("gpu",),
) -> TopologyModel:
    """``{"leaf1": ("spine1", free, busy), ...}``; spines go under one ``core`` when there are two+.

    Node names are ``<leaf>n<i>``; free nodes come first, then busy (fully allocated) ones.
    """
    switches: list[SlurmSwitch] = []
    nodes: list[SlurmNode] = []
    spines: dict[str, list[str]] = {}
    for leaf, (spine, free, busy) in leaves.items():
        names = tuple(f"{leaf}n{i}" for i in range(1, free + busy + 1))
        switches.append(SlurmSwitch(leaf, 0, nodes=names))
        if spine:
            spines.setdefault(spine, []).append(leaf)
        for i, name in enumerate(names):
            used = i >= free
            nodes.append(
                SlurmNode(
                    name,
                    NodeState.ALLOCATED if used else NodeState.IDLE,
                    cpus_total=cpus,
                    cpus_allocated=cpus if used else 0,
                    gpus_total=gpus,
                    gpus_allocated=gpus if used else 0,
                    partitions=partitions,
                )
            )
    for spine, kids in spines.items():
        switches.append(SlurmSwitch(spine, 1, switches=tuple(kids)))
    if len(spines) > 1:
        switches.append(SlurmSwitch("core", 2, switches=tuple(spines)))
    return TopologyModel.build(switches, nodes)
