"""Errors of the topology package: one root so callers can catch the package as a whole.

A well-formed placement request never raises: what does not fit becomes an infeasible
:class:`~clusterd.topology.planner.Plan` with an explanation. Only malformed input raises.
"""

from __future__ import annotations

from clusterctl.hostlist import HostlistError  # noqa: F401 - re-exported: the topology API raises it
from clusterd.slurm.topology_text import TopologyParseError  # noqa: F401 - re-exported: Slurm's text is read below the seam


class TopologyError(Exception):
    """Root of the topology package's errors."""


class InvalidPlacementRequest(TopologyError, ValueError):
    """A request that is malformed (not merely infeasible): zero nodes, unknown policy..."""
