"""Goodput summed over many jobs: per partition and user for the dashboard, per partition for
Prometheus (a per-job or per-user label would grow without bound)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from clusterd.goodput.accounting import PARTS, Goodput, ettr


@dataclass
class FleetRow:
    partition: str
    user: str  # "" when summed over users
    jobs: int = 0
    wall_seconds: float = 0.0
    breakdown: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))

    @property
    def ettr(self) -> float:
        """Wall-time weighted: long jobs count for what they cost."""
        return ettr(self.breakdown, self.wall_seconds)

    def add(self, g: Goodput) -> None:
        self.jobs += 1
        self.wall_seconds += g.wall_seconds
        for part, seconds in g.breakdown.items():
            self.breakdown[part] += seconds


def summarize(jobs: Iterable[tuple[str, str, Goodput]], *, by_user: bool = True) -> list[FleetRow]:
    """Rows of (partition, user) (or partition alone), in name order, from (partition, user, goodput)."""
    rows: dict[tuple[str, str], FleetRow] = {}
    for partition, user, g in jobs:
        key = (partition, user if by_user else "")
        rows.setdefault(key, FleetRow(*key)).add(g)
    return [rows[k] for k in sorted(rows)]
