"""Synthetic switch trees for tests and the placement benchmark.

``synthetic_cluster(leaves=32, nodes_per_leaf=32, spines=4, seed=...)`` builds a 3-level tree
(one core over spines over leaves; ``spines=0`` gives 2 levels) with a reproducible random mix
of idle, partly used, fully used, down and draining nodes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from clusterd.slurm.types import NodeState, SlurmNode, SlurmSwitch


@dataclass(frozen=True)
class BusyMix:
    """Fractions of nodes in each condition; the rest are idle."""

    full: float = 0.3
    partial: float = 0.15
    down: float = 0.02
    drain: float = 0.02


def synthetic_topology(leaves: int, nodes_per_leaf: int, spines: int) -> list[SlurmSwitch]:
    """Switch records named ``leafN``, ``spineN``, ``core``; nodes ``nodeNNNN`` (1-based)."""
    width = max(4, len(str(leaves * nodes_per_leaf)))
    out: list[SlurmSwitch] = []
    for i in range(leaves):
        first = i * nodes_per_leaf + 1
        names = tuple(f"node{n:0{width}d}" for n in range(first, first + nodes_per_leaf))
        out.append(SlurmSwitch(name=f"leaf{i + 1}", level=0, nodes=names))
    if spines:
        per = -(-leaves // spines)
        for s in range(spines):
            kids = tuple(f"leaf{i + 1}" for i in range(s * per, min((s + 1) * per, leaves)))
            if kids:
                out.append(SlurmSwitch(name=f"spine{s + 1}", level=1, switches=kids))
        used = tuple(x.name for x in out if x.level == 1)
        out.append(SlurmSwitch(name="core", level=2, switches=used))
    else:
        out.append(SlurmSwitch(name="core", level=1, switches=tuple(f"leaf{i + 1}" for i in range(leaves))))
    return out


def synthetic_nodes(
    switches: list[SlurmSwitch],
    *,
    gpus: int = 8,
    cpus: int = 64,
    mix: BusyMix | None = None,
    seed: int = 0,
    partitions: tuple[str, ...] = ("gpu",),
) -> list[SlurmNode]:
    """One node per name under the leaves, in a random (seeded) busy mix."""
    mix = mix or BusyMix()
    rng = random.Random(seed)
    out: list[SlurmNode] = []
    for sw in switches:
        for name in sw.nodes:
            r = rng.random()
            state, ga, ca = NodeState.IDLE, 0, 0
            flags: tuple[str, ...] = ()
            if r < mix.full:
                state, ga, ca = NodeState.ALLOCATED, gpus, cpus
            elif r < mix.full + mix.partial:
                ga = rng.randint(1, max(gpus - 1, 1)) if gpus > 1 else 0
                ca = rng.randint(1, max(cpus - 1, 1))
                state = NodeState.MIXED
            elif r < mix.full + mix.partial + mix.down:
                state = NodeState.DOWN
            elif r < mix.full + mix.partial + mix.down + mix.drain:
                # sinfo reports draining nodes either as a state or as IDLE plus a DRAIN flag
                state = rng.choice([NodeState.DRAINED, NodeState.DRAINING, NodeState.IDLE])
                flags = ("DRAIN",)
            out.append(
                SlurmNode(
                    name=name,
                    state=state,
                    cpus_total=cpus,
                    cpus_allocated=ca,
                    gpus_total=gpus,
                    gpus_allocated=ga,
                    partitions=partitions,
                    flags=flags,
                )
            )
    return out


def synthetic_cluster(
    leaves: int = 8,
    nodes_per_leaf: int = 16,
    spines: int = 2,
    *,
    gpus: int = 8,
    cpus: int = 64,
    mix: BusyMix | None = None,
    seed: int = 0,
) -> tuple[list[SlurmSwitch], list[SlurmNode]]:
    """Topology records plus node states, ready for ``TopologyModel.build``."""
    switches = synthetic_topology(leaves, nodes_per_leaf, spines)
    return switches, synthetic_nodes(switches, gpus=gpus, cpus=cpus, mix=mix, seed=seed)
