"""Each node of the local stack has memory of its own: a private tmpfs on /dev/shm that no other
node sees and that `stack.sh kill-node` destroys (what a memory tier on that node loses)."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.stack import Stack

pytestmark = pytest.mark.slurm

NODE = "node6"
PROBE = "/dev/shm/clusterctl-node-memory-probe"


def _in_node(stack: Stack, node: str, script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in the mount namespace of the node's slurmd (where its jobs run)."""
    pid = (stack.dir / "run" / f"slurmd-{node}.pid").read_text().strip()
    return subprocess.run(["nsenter", "-t", pid, "-m", "sh", "-c", script], capture_output=True, text=True, timeout=30)


def _restart(stack: Stack, node: str) -> None:
    for verb in ("kill-node", "revive-node"):
        done = stack.stack_sh(verb, node)
        assert done.returncode == 0, done.stderr


def test_a_nodes_shm_is_its_own_and_gone_after_kill_node(stack: Stack, killed_nodes: list[str]) -> None:
    killed_nodes.append(NODE)
    _restart(stack, NODE)  # its slurmd starts the way this checkout's stack.sh starts nodes
    assert _in_node(stack, NODE, f"echo step-7 > {PROBE} && cat {PROBE}").stdout == "step-7\n"
    assert subprocess.run(["test", "-e", PROBE]).returncode != 0, "the host's /dev/shm sees the node's memory"
    assert _in_node(stack, "node5", f"test -e {PROBE}").returncode != 0, "another node sees the node's memory"
    _restart(stack, NODE)
    assert _in_node(stack, NODE, f"test -e {PROBE}").returncode != 0, "the node's memory survived kill-node"
