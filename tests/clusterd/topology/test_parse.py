"""``scontrol show topology`` parsing, from the documented 22.05 format."""

from __future__ import annotations

import pathlib

import pytest

from clusterd.slurm.types import SlurmSwitch
from clusterd.topology import TopologyParseError, parse_topology
from tests.support.paths import SLURM_FIXTURES

SCONTROL_2205 = """\
SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-3]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[4-6]
SwitchName=spine Level=1 LinkSpeed=1 Switches=leaf[1-2]
"""


def test_scontrol_output() -> None:
    assert parse_topology(SCONTROL_2205) == [
        SlurmSwitch("leaf1", 0, nodes=("node1", "node2", "node3")),
        SlurmSwitch("leaf2", 0, nodes=("node4", "node5", "node6")),
        SlurmSwitch("spine", 1, switches=("leaf1", "leaf2")),
    ]


def test_empty_and_no_topology() -> None:
    assert parse_topology("") == []
    assert parse_topology("No topology information available\n") == []


def test_topology_conf_without_levels() -> None:
    text = """\
# three levels, no Level= (topology.conf style)
SwitchName=s0 Nodes=tux[0-1]
SwitchName=s1 Nodes=tux[2-3]
SwitchName=s2 Switches=s[0-1]
switchname=s3 switches=s2
"""
    levels = {s.name: s.level for s in parse_topology(text)}
    assert levels == {"s0": 0, "s1": 0, "s2": 1, "s3": 2}


def test_keys_case_insensitive_and_unknown_ignored() -> None:
    (sw,) = parse_topology("switchname=a level=0 linkspeed=100 nodes=n[01-02] Extra=1")
    assert sw == SlurmSwitch("a", 0, nodes=("n01", "n02"))


def test_null_members() -> None:
    (sw,) = parse_topology("SwitchName=a Level=0 LinkSpeed=1 Nodes=(null)")
    assert sw.nodes == ()


@pytest.mark.parametrize(
    "text",
    [
        "SwitchName=a Level=x Nodes=n1",
        "SwitchName=a Level=0 Nodes=n[1-",
        "SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2",
        "SwitchName=a Switches=b\nSwitchName=b Switches=a",
    ],
)
def test_malformed(text: str) -> None:
    with pytest.raises(TopologyParseError):
        parse_topology(text)


@pytest.mark.parametrize("path", sorted(SLURM_FIXTURES.glob("*topology*")), ids=lambda p: p.name)
def test_captured_fixtures_parse(path: pathlib.Path) -> None:
    """Real captures (added by the Slurm stack work) must parse into a connected tree."""
    switches = parse_topology(path.read_text())
    assert switches
    names = {s.name for s in switches}
    for s in switches:
        assert set(s.switches) <= names
        assert (s.level == 0) == bool(s.nodes) or s.level > 0
