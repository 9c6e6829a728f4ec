"""Applies the topology planner to a submission: sbatch arguments plus the explanation users see.

The planner (clusterd.topology) is pure; this adapter feeds it the poller's latest snapshot and
turns an infeasible plan into a clear INVALID_ARGUMENT instead of a job that would pend forever.
"""

from __future__ import annotations

from clusterctl.v1 import cluster_pb2
from clusterd.errors import InvalidArgument
from clusterd.jobs.validate import ResolvedJob
from clusterd.supervisor.cache import QueueCache
from clusterd.topology.errors import InvalidPlacementRequest
from clusterd.topology.model import TopologyModel
from clusterd.topology.planner import PlacementRequest, Plan, plan

_POLICIES = {
    cluster_pb2.PLACEMENT_POLICY_UNSPECIFIED: "pack",
    cluster_pb2.PLACEMENT_POLICY_PACK: "pack",
    cluster_pb2.PLACEMENT_POLICY_ANY: "any",
    cluster_pb2.PLACEMENT_POLICY_EXACT: "exact",
}
DEFAULT_MAX_WAIT_SECONDS = 300


def placement_request(
    *,
    nodes: int,
    gpus_per_node: int,
    cpus_per_node: int,
    partition: str,
    pref: cluster_pb2.PlacementPreference,
) -> PlacementRequest:
    return PlacementRequest(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        cpus_per_node=cpus_per_node,
        partition=partition.split(",")[0] or None,
        policy=_POLICIES.get(pref.policy, "pack"),  # type: ignore[arg-type]
        max_wait_seconds=pref.max_wait_seconds or DEFAULT_MAX_WAIT_SECONDS,
        switch_count=pref.switch_count or None,
        exclude_nodes=tuple(pref.exclude_nodes),
        nodelist=tuple(pref.nodelist),
    )


class TopologyPlacer:
    def __init__(self, poller: QueueCache) -> None:
        self._poller = poller

    def model(self) -> TopologyModel:
        snap = self._poller.snapshot
        return TopologyModel.build(list(snap.switches), list(snap.nodes))

    def dry_run(self, request: PlacementRequest, *, field: str = "placement") -> Plan:
        try:
            return plan(self.model(), request)
        except InvalidPlacementRequest as exc:
            raise InvalidArgument(field, str(exc)) from exc

    def __call__(self, job: ResolvedJob, pref: cluster_pb2.PlacementPreference) -> tuple[list[str], str]:
        if not self._poller.snapshot.nodes:
            return [], "placement not planned: the service has no node information from Slurm yet"
        request = placement_request(
            nodes=job.nodes,
            gpus_per_node=job.gpus_per_node,
            cpus_per_node=job.tasks_per_node * job.cpus_per_task,
            partition=job.partition,
            pref=pref,
        )
        result = self.dry_run(request, field="spec.placement")
        if not result.feasible:
            raise InvalidArgument(self._blame(job, pref), result.explanation)
        return list(result.sbatch_args), result.explanation

    def _blame(self, job: ResolvedJob, pref: cluster_pb2.PlacementPreference) -> str:
        """The field most likely responsible for an infeasible request."""
        nodes = self._poller.snapshot.nodes
        if job.gpus_per_node and all(n.gpus_total < job.gpus_per_node for n in nodes):
            return "spec.gpus_per_node"
        if pref.nodelist:
            return "spec.placement.nodelist"
        if pref.policy == cluster_pb2.PLACEMENT_POLICY_EXACT:
            return "spec.placement.switch_count"
        return "spec.nodes"
