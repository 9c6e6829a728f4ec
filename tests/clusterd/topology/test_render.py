"""The rich tree for ``clusterctl topology``: switches with sums, nodes with state and GPUs."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from clusterd.slurm.types import NodeState
from clusterd.topology.render import render_tree

from .helpers import tree


def text_of(renderable: object) -> str:
    console = Console(width=140, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_tree_shows_free_over_total() -> None:
    m = tree({"leaf1": ("spine", 1, 1), "leaf2": ("spine", 2, 0)})
    m = m.with_nodes([dataclasses.replace(m.node("leaf2n2"), state=NodeState.DOWN)])
    out = text_of(render_tree(m))
    assert "cluster  gpus 16/32 free  nodes 2 idle, 3 usable/4" in out
    assert "spine L1  gpus 16/32 free" in out
    assert "leaf1 L0  gpus 8/16 free  nodes 1 idle, 2 usable/2" in out
    assert "leaf1n2  allocated  gpus 0/8" in out
    assert "leaf2n2  down  gpus 0/8" in out
    assert out.index("spine") < out.index("leaf1") < out.index("leaf1n1") < out.index("leaf2")


def test_switches_only() -> None:
    out = text_of(render_tree(tree({"leaf1": (None, 2, 0)}), show_nodes=False))
    assert "leaf1 L0" in out and "leaf1n1" not in out
