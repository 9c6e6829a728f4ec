"""Which command the commands backend lists nodes with: sinfo on 22.05, scontrol's per-node JSON on newer
releases, whose sinfo --json leaves node addresses out (the liveness probe needs them)."""

from __future__ import annotations

import pytest

from clusterd.config import SlurmConfig
from clusterd.slurm.commands import CommandsBackend
from tests.support.paths import SLURM_FIXTURES
from tests.support.runner import ScriptedRunner


@pytest.mark.parametrize(
    ("version", "command", "fixture", "address", "port"),
    [
        ("slurm-wlm 22.05.8", ("sinfo", "--json"), "sinfo_all_idle.json", "10.77.0.11", 6818),
        (
            "slurm-wlm 26.05.5",
            ("scontrol", "show", "nodes", "--json"),
            "scontrol_show_nodes_26.05_real.json",
            "10.77.26.11",
            26818,
        ),
    ],
)
async def test_nodes_come_with_their_addresses(
    version: str, command: tuple[str, ...], fixture: str, address: str, port: int
) -> None:
    runner = ScriptedRunner({("sbatch", "--version"): version, command: (SLURM_FIXTURES / fixture).read_text()})
    backend = CommandsBackend(SlurmConfig(), runner=runner)  # type: ignore[arg-type]
    for _ in range(2):
        nodes = {n.name: n for n in await backend.list_nodes()}
        assert (nodes["node1"].address, nodes["node1"].port) == (address, port)
        assert sorted(nodes) == [f"node{i}" for i in range(1, 7)] and nodes["node1"].gpus_total == 4
    assert runner.calls.count(["sbatch", "--version"]) == 1  # decided once


def test_newer_sinfo_json_has_no_addresses() -> None:
    """Why: the same moment's sinfo --json on 26.05 names no address at all."""
    from clusterd.slurm.parse import parse_sinfo

    assert {n.address for n in parse_sinfo((SLURM_FIXTURES / "sinfo_26.05_real.json").read_text())} == {""}
