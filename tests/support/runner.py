"""A CommandRunner that answers from a table: the commands backend's logic without Slurm."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clusterd.slurm.runner import CommandResult


@dataclass
class ScriptedRunner:
    """Answers each argv from a table (the real outputs captured on each release's stack)."""

    answers: dict[tuple[str, ...], str]
    calls: list[list[str]] = field(default_factory=list)

    async def run(self, argv: list[str], **_: Any) -> CommandResult:
        self.calls.append(argv)
        return CommandResult(self.answers[tuple(argv)], "", 0)
