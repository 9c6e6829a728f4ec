"""The node count a job is planned for, as slurmctld counts it."""

from __future__ import annotations

import pytest

from clusterd.topology.demand import node_count


@pytest.mark.parametrize(
    ("nodes", "max_nodes", "nodelist", "count"),
    [
        (None, None, (), 1),
        (3, None, (), 3),
        (2, 6, (), 2),  # MIN: feasible when MIN fits
        (None, None, ("a", "b"), 2),  # -w a,b: the list's size
        (None, None, ("a", "a", "b"), 2),
        (1, 4, ("a", "b", "c"), 3),
        (4, None, ("a",), 4),  # Slurm adds nodes to the listed ones
        (1, None, ("a", "b"), 1),  # past -N's MAX: left for the planner to refuse, as Slurm refuses it
    ],
)
def test_node_count(nodes: int | None, max_nodes: int | None, nodelist: tuple[str, ...], count: int) -> None:
    assert node_count(nodes, max_nodes, nodelist) == count
