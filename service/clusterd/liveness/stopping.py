"""Agreeing on the step a run stops at, for ranks that share no process group.

A stop signal (SIGUSR1 before the time limit, SIGTERM on preemption) reaches a job's ranks at
different steps, and a checkpoint step commits only when every rank wrote it. Each rank that got
the signal, or heard that a stop is under way, holds at the step it finished and claims it in its
heartbeats. Once every rank of the run holds, the stop step is the highest held: no rank is past
it, so every rank can train on to it, save it, and the save commits. The decision is taken once
per run and never moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StopAgreement:
    """One run's stop: the step each rank holds at, and the step decided once all of them hold."""

    held: dict[int, int] = field(default_factory=dict)  # rank -> the step it holds at
    step: int | None = None  # decided: every rank of the run held

    @property
    def under_way(self) -> bool:
        return bool(self.held)

    def claim(self, rank: int, step: int, world_size: int) -> int | None:
        """Take ``rank``'s claim to hold at ``step`` in a run of ``world_size`` ranks; the decided step, if any.

        A rank that claims again keeps its highest claim (a rank that held does not move back);
        once decided, later claims change nothing.
        """
        if self.step is None:
            self.held[rank] = max(step, self.held.get(rank, step))
            self.decide(world_size)
        return self.step

    def decide(self, world_size: int) -> int | None:
        """The stop step once ranks ``0 .. world_size-1`` all hold (ranks beyond are not counted)."""
        if self.step is None and world_size > 0 and len(self.held) >= world_size:
            steps = [step for rank, step in self.held.items() if rank < world_size]
            if len(steps) == world_size:
                self.step = max(steps)
        return self.step
