"""What a job asks of the fabric: the planner's input, shared with the text that explains a plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Policy = Literal["pack", "any", "exact"]
POLICIES: tuple[str, ...] = get_args(Policy)


@dataclass(frozen=True)
class Preference:
    """What a submission or a dry run asks of placement beyond its size (the API's
    PlacementPreference in the service's own terms; None: not asked, the default applies)."""

    policy: Policy = "pack"
    max_wait_seconds: int | None = None
    switch_count: int | None = None
    exclude_nodes: tuple[str, ...] = ()
    nodelist: tuple[str, ...] = ()


def node_count(nodes: int | None, max_nodes: int | None, nodelist: tuple[str, ...]) -> int:
    """The node count Slurm plans a job for: ``-N``'s MIN (feasible when MIN fits: Slurm may start
    it on MIN), raised to the nodelist's size as slurmctld raises it, unless that passes ``-N``'s MAX
    (``-N 1 -w a,b``: Slurm refuses the count, and so does the planner)."""
    count = nodes or 1
    listed = len(dict.fromkeys(nodelist))
    most = max_nodes or nodes
    return listed if listed > count and (most is None or listed <= most) else count


@dataclass(frozen=True)
class PlacementRequest:
    """What a job asks of the fabric. Node names may be given as hostlist expressions."""

    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_node: int = 0
    partition: str | None = None
    policy: Policy = "pack"
    max_wait_seconds: int = 300
    switch_count: int | None = None  # policy "exact": at most this many leaf switches
    exclude_nodes: tuple[str, ...] = ()
    nodelist: tuple[str, ...] = ()
