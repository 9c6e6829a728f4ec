"""Which steps the commands backend kills: all of a job's, or (a relaunch in place) those on failed nodes."""

from __future__ import annotations

from clusterd.config import SlurmConfig
from clusterd.slurm import argv
from clusterd.slurm.commands import CommandsBackend
from tests.support.runner import ScriptedRunner

# squeue --steps --format="%i %N" of a 2+1 node job: a memory tier per node, and its ranks' step.
_STEPS = "4937.0 node1\n4937.1 node2\n4937.2 node3\n4937.3 node[1-2]\n"


async def _killed(on_nodes: tuple[str, ...] | None) -> list[str]:
    runner = ScriptedRunner({tuple(argv.steps_argv("4937")): _STEPS})
    for steps in (["4937.1", "4937.3"], [f"4937.{i}" for i in range(4)]):
        runner.answers[tuple(argv.kill_step_argv(steps))] = ""
    await CommandsBackend(SlurmConfig(), runner=runner).kill_steps("4937", on_nodes)  # type: ignore[arg-type]
    return runner.calls[-1][2:]


async def test_every_step_is_killed_unless_nodes_are_named() -> None:
    assert await _killed(None) == ["4937.0", "4937.1", "4937.2", "4937.3"]


async def test_a_relaunch_kills_only_the_steps_on_the_failed_node() -> None:
    assert await _killed(("node2",)) == ["4937.1", "4937.3"]
