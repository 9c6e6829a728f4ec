"""Topology-aware placement: the switch tree, the planner and the text that explains it.

Pure logic: nothing here calls Slurm or gRPC. Inputs are the seam types of
:mod:`clusterd.slurm.types`; outputs are plain dataclasses the servicer maps to protos.
"""

from clusterctl.hostlist import compress_hostlist, expand_hostlist
from clusterd.slurm.topology_text import parse_topology
from clusterd.topology.demand import PlacementRequest, Policy
from clusterd.topology.errors import (
    HostlistError,
    InvalidPlacementRequest,
    TopologyError,
    TopologyParseError,
)
from clusterd.topology.model import IMPLICIT_LEAF, SwitchStats, TopologyModel
from clusterd.topology.planner import Plan, plan

__all__ = [
    "IMPLICIT_LEAF",
    "HostlistError",
    "InvalidPlacementRequest",
    "PlacementRequest",
    "Plan",
    "Policy",
    "SwitchStats",
    "TopologyError",
    "TopologyModel",
    "TopologyParseError",
    "compress_hostlist",
    "expand_hostlist",
    "parse_topology",
    "plan",
]
