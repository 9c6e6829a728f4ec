"""Parse ``scontrol show topology`` (Slurm 22.05) into :class:`SlurmSwitch` records.

One line per switch::

    SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-3]
    SwitchName=spine Level=1 LinkSpeed=1 Switches=leaf[1-2]

Keys are case-insensitive and unknown keys are ignored, so the same parser reads a
``topology.conf`` (which has no ``Level=``; levels are then derived from the tree: leaves 0, a
parent one above its highest child). Lines that are not switch lines (blank, ``#`` comments,
"No topology information available") are skipped: a cluster without topology simply yields
``[]`` and the model then treats every node as one implicit leaf.
"""

from __future__ import annotations

import shlex

from clusterctl.hostlist import HostlistError, expand_hostlist
from clusterd.slurm.types import SlurmSwitch


class TopologyParseError(ValueError):
    """``scontrol show topology`` output that does not describe a tree."""


def _fields(line: str) -> dict[str, str]:
    try:
        tokens = shlex.split(line, comments=False, posix=True)
    except ValueError:  # an unbalanced quote: fall back to plain whitespace
        tokens = line.split()
    out: dict[str, str] = {}
    for token in tokens:
        key, sep, value = token.partition("=")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def _derive_levels(raw: list[tuple[str, int | None, tuple[str, ...], tuple[str, ...]]]) -> dict[str, int]:
    """Levels for switches that did not state one: leaves 0, parents above their children."""
    children = {name: switches for name, _, _, switches in raw}
    stated = {name: level for name, level, _, _ in raw if level is not None}
    levels: dict[str, int] = {}

    def level_of(name: str, trail: tuple[str, ...]) -> int:
        if name in levels:
            return levels[name]
        if name in trail:
            raise TopologyParseError(f"switch cycle through {name!r}")
        if name in stated:
            levels[name] = stated[name]
            return levels[name]
        kids = [k for k in children.get(name, ()) if k in children]
        value = 0 if not kids else 1 + max(level_of(k, (*trail, name)) for k in kids)
        levels[name] = value
        return value

    for name in children:
        level_of(name, ())
    return levels


def parse_topology(text: str) -> list[SlurmSwitch]:
    """Switch records in the order printed.

    Raises:
        TopologyParseError: a switch named twice, a bad ``Level=``, a hostlist that does not
            expand, or a cycle among switches.
    """
    raw: list[tuple[str, int | None, tuple[str, ...], tuple[str, ...]]] = []
    seen: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = _fields(line)
        name = fields.get("switchname")
        if not name:
            continue
        if name in seen:
            raise TopologyParseError(f"line {lineno}: switch {name!r} listed twice")
        seen.add(name)
        level: int | None = None
        if "level" in fields:
            try:
                level = int(fields["level"])
            except ValueError as exc:
                raise TopologyParseError(f"line {lineno}: bad Level={fields['level']!r}") from exc
        try:
            nodes = tuple(expand_hostlist(fields.get("nodes", "")))
            switches = tuple(expand_hostlist(fields.get("switches", "")))
        except HostlistError as exc:
            raise TopologyParseError(f"line {lineno}: {exc}") from exc
        raw.append((name, level, nodes, switches))

    levels = _derive_levels(raw)
    return [
        SlurmSwitch(name=name, level=levels[name], nodes=nodes, switches=switches) for name, _, nodes, switches in raw
    ]
