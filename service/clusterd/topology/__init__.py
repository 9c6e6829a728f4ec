"""Topology-aware placement: the switch tree, the planner and the text that explains it.

Pure logic: nothing here calls Slurm or gRPC. Inputs are the seam types of
:mod:`clusterd.slurm.types`; outputs are plain dataclasses the servicer maps to protos.
"""

from clusterctl.hostlist import compress_hostlist, expand_hostlist
from clusterd.topology.errors import (
    HostlistError,
    InvalidPlacementRequest,
    TopologyError,
    TopologyParseError,
)
from clusterd.topology.model import IMPLICIT_LEAF, SwitchStats, TopologyModel
from clusterd.topology.parse import parse_topology
from clusterd.topology.planner import PlacementRequest, Plan, Policy, plan

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
