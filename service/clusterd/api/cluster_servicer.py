"""ClusterService: the topology and node view from the queue cache, and placement dry runs."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from clusterctl.v1 import cluster_pb2, cluster_pb2_grpc
from clusterd.api import convert
from clusterd.api.spec_convert import placement_from_proto
from clusterd.errors import InvalidArgument
from clusterd.jobs.validate import placement_preference
from clusterd.placement import TopologyPlacer, placement_request
from clusterd.supervisor.cache import QueueCache
from clusterd.topology.model import TopologyModel


def _node_switch(model: TopologyModel, name: str) -> str:
    try:
        return model.leaf_of(name)
    except KeyError:
        return ""


def topology_proto(model: TopologyModel) -> cluster_pb2.Topology:
    topo = cluster_pb2.Topology(roots=list(model.roots))
    for name in model.switch_names:
        sw = model.switch(name)
        st = model.stats(name)
        topo.switches.add(
            name=name,
            level=sw.level,
            nodes=list(model.leaf_nodes(name)),
            switches=list(model.children(name)),
            nodes_total=st.nodes_total,
            nodes_free=st.nodes_idle,
            gpus_total=st.gpus_total,
            gpus_free=st.gpus_free,
            cpus_total=st.cpus_total,
            cpus_free=st.cpus_free,
        )
    for name, node in sorted(model.nodes.items()):
        topo.nodes.append(convert.node(node, _node_switch(model, name)))
    return topo


class ClusterServicer(cluster_pb2_grpc.ClusterServiceServicer):
    def __init__(
        self, cache: QueueCache, placer: TopologyPlacer, health: Callable[[str], str] = lambda node: ""
    ) -> None:
        """``health``: clusterd's record of a node's failures across jobs (liveness.health)."""
        self._cache = cache
        self._placer = placer
        self._health = health

    async def GetTopology(
        self, request: cluster_pb2.GetTopologyRequest, context: grpc.aio.ServicerContext
    ) -> cluster_pb2.GetTopologyResponse:
        return cluster_pb2.GetTopologyResponse(topology=topology_proto(self._placer.model()))

    async def ListNodes(
        self, request: cluster_pb2.ListNodesRequest, context: grpc.aio.ServicerContext
    ) -> cluster_pb2.ListNodesResponse:
        model = self._placer.model()
        wanted = set(request.states)
        out = []
        for name, node in sorted(model.nodes.items()):
            if request.partition and request.partition not in node.partitions:
                continue
            msg = convert.node(node, _node_switch(model, name))
            msg.health = self._health(name)
            if not wanted or msg.state in wanted:
                out.append(msg)
        return cluster_pb2.ListNodesResponse(nodes=out)

    async def PlanPlacement(
        self, request: cluster_pb2.PlanPlacementRequest, context: grpc.aio.ServicerContext
    ) -> cluster_pb2.PlanPlacementResponse:
        if request.nodes == 0:
            raise InvalidArgument("nodes", "must be at least 1")
        if request.nodes > 100_000:
            raise InvalidArgument("nodes", "is unreasonably large")
        facts = self._cache.facts()
        if request.partition and facts.partitions and request.partition not in facts.partitions:
            raise InvalidArgument("partition", f"unknown partition {request.partition!r}")
        result = self._placer.dry_run(
            placement_request(
                nodes=request.nodes,
                gpus_per_node=request.gpus_per_node,
                cpus_per_node=request.cpus_per_node,
                partition=request.partition or facts.default_partition,
                pref=placement_preference(placement_from_proto(request.placement, strict=False)),
            )
        )
        return cluster_pb2.PlanPlacementResponse(
            placement=cluster_pb2.Placement(
                feasible=result.feasible,
                available_now=result.available_now,
                nodes=result.nodes,
                switches=result.switches,
                spine_hops=result.spine_hops,
                explanation=result.explanation,
                sbatch_args=result.sbatch_args,
            )
        )
