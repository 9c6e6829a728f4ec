"""Which steps the commands backend kills: all of a job's, or (a relaunch in place) those on failed nodes."""

from __future__ import annotations

import pytest

from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError
from clusterd.slurm import argv
from clusterd.slurm.commands import CommandsBackend
from tests.support.runner import ScriptedRunner

# squeue --steps --format="%i %N" of a 2+1 node job: a memory tier per node, and its ranks' step.
_STEPS = "4937.0 node1\n4937.1 node2\n4937.2 node3\n4937.3 node[1-2]\n4937.batch node1\n4937.extern node[1-3]\n"


def _backend(listing: str) -> tuple[CommandsBackend, ScriptedRunner]:
    runner = ScriptedRunner({tuple(argv.steps_argv("4937")): listing})
    return CommandsBackend(SlurmConfig(), runner=runner), runner  # type: ignore[arg-type]


async def test_every_step_is_killed_unless_nodes_are_named_never_the_batch_shell() -> None:
    backend, runner = _backend(_STEPS)
    runner.answers[tuple(argv.kill_step_argv([f"4937.{i}" for i in range(4)]))] = ""
    await backend.kill_steps("4937")
    assert runner.calls[-1][2:] == ["4937.0", "4937.1", "4937.2", "4937.3"]


async def test_a_relaunch_kills_only_the_steps_on_the_failed_node() -> None:
    backend, _ = _backend(_STEPS)
    assert await backend.steps_on("4937", ("node2",)) == ("4937.1", "4937.3")


async def test_het_and_array_steps_and_multi_range_hostlists_are_matched() -> None:
    listing = "4937+0.0 a[1-2],b3\n4937+1.0 c1\n4937_3.0 d[01-02]\n4937+0.batch a1\n"
    backend, _ = _backend(listing)
    assert await backend.steps_on("4937", ("b3",)) == ("4937+0.0",)
    assert await backend.steps_on("4937", ("a2", "d02")) == ("4937+0.0", "4937_3.0")


async def test_no_step_on_the_failed_nodes_kills_every_step() -> None:
    backend, _ = _backend(_STEPS)
    assert await backend.steps_on("4937", ("node9",)) == ("4937.0", "4937.1", "4937.2", "4937.3")


async def test_a_malformed_hostlist_is_a_slurm_error() -> None:
    backend, _ = _backend("4937.0 node[1-\n")
    with pytest.raises(SlurmError, match="node list"):
        await backend.steps_on("4937", ("node1",))
