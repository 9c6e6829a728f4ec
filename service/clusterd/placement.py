"""Applies the topology planner to a submission: the request's placement fields plus the explanation.

The planner (clusterd.topology) is pure; this adapter feeds it the queue cache's latest snapshot and
turns an infeasible plan into a clear INVALID_ARGUMENT instead of a job that would pend forever.
"""

from __future__ import annotations

from dataclasses import replace

from clusterd.errors import InvalidArgument
from clusterd.slurm.request import JobRequest, Switches
from clusterd.supervisor.cache import ClusterSnapshot, QueueCache
from clusterd.topology.demand import PlacementRequest, Preference, node_count
from clusterd.topology.errors import InvalidPlacementRequest
from clusterd.topology.model import TopologyModel
from clusterd.topology.planner import Plan, plan

DEFAULT_MAX_WAIT_SECONDS = 300
_PLANS_KEPT = 256  # distinct request shapes remembered per snapshot (a submit storm repeats one)


def placement_request(
    *,
    nodes: int,
    gpus_per_node: int,
    cpus_per_node: int,
    partition: str,
    pref: Preference,
) -> PlacementRequest:
    return PlacementRequest(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        cpus_per_node=cpus_per_node,
        partition=partition.split(",")[0] or None,
        policy=pref.policy,
        max_wait_seconds=pref.max_wait_seconds or DEFAULT_MAX_WAIT_SECONDS,
        switch_count=pref.switch_count,
        exclude_nodes=pref.exclude_nodes,
        nodelist=pref.nodelist,
    )


class TopologyPlacer:
    def __init__(self, cache: QueueCache) -> None:
        self._cache = cache
        self._built: tuple[ClusterSnapshot, TopologyModel] | None = None
        self._plans: dict[PlacementRequest, Plan] = {}  # of the built model; shared, read-only

    def model(self) -> TopologyModel:
        """The model of the cache's latest snapshot, built once per snapshot (every submit plans on it)."""
        snap = self._cache.snapshot
        if self._built is None or self._built[0] is not snap:
            self._built = (snap, TopologyModel.build(list(snap.switches), list(snap.nodes)))
            self._plans = {}
        return self._built[1]

    def dry_run(self, request: PlacementRequest, *, field: str = "placement") -> Plan:
        """The plan for ``request`` on the latest snapshot. The planner is a pure function of the two,
        so a request shape already planned on this snapshot (16 clients submitting the same job) is
        answered from memory: planning each one costs a tenth of the event loop's time per submit."""
        model = self.model()
        known = self._plans.get(request)
        if known is not None:
            return known
        try:
            result = plan(model, request)
        except InvalidPlacementRequest as exc:
            raise InvalidArgument(field, str(exc)) from exc
        if len(self._plans) >= _PLANS_KEPT:
            self._plans.clear()
        self._plans[request] = result
        return result

    def __call__(self, job: JobRequest, pref: Preference) -> tuple[JobRequest, str]:
        """``job`` with its switches/exclude/nodelist planned, and the explanation users see."""
        if not self._cache.snapshot.nodes:
            return job, "placement not planned: the service has no node information from Slurm yet"
        nodelist = pref.nodelist or job.nodelist
        request = replace(
            placement_request(
                nodes=node_count(job.nodes, job.max_nodes, nodelist),
                gpus_per_node=job.gpus_per_node or 0,
                cpus_per_node=(job.tasks_per_node or 1) * (job.cpus_per_task or 1),
                partition=job.partition,
                pref=pref,
            ),
            exclude_nodes=tuple(dict.fromkeys([*pref.exclude_nodes, *job.exclude])),
            nodelist=nodelist,
        )
        result = self.dry_run(request, field="spec.placement")
        if not result.feasible:
            raise InvalidArgument(self._blame(job, pref), result.explanation)
        switches = job.switches
        if result.switch_limit is not None:
            switches = Switches(result.switch_limit, request.max_wait_seconds)
        planned = replace(job, switches=switches, exclude=result.exclude, nodelist=result.nodelist)
        return planned, result.explanation + _range_note(job)

    def _blame(self, job: JobRequest, pref: Preference) -> str:
        """The field most likely responsible for an infeasible request."""
        nodes = self._cache.snapshot.nodes
        if job.gpus_per_node and all(n.gpus_total < job.gpus_per_node for n in nodes):
            return "spec.gpus_per_node"
        if pref.nodelist:
            return "spec.placement.nodelist"
        if job.nodelist:  # only an #SBATCH --nodelist sets it before planning
            return "spec.script"
        if pref.policy == "exact":
            return "spec.placement.switch_count"
        return "spec.nodes"


def _range_note(job: JobRequest) -> str:
    """What users of -N MIN-MAX with --ntasks-per-node (and no -n) rarely expect from Slurm."""
    if job.max_nodes and job.nodes and job.max_nodes > job.nodes and job.tasks_per_node and not job.ntasks:
        tasks = job.nodes * job.tasks_per_node
        return (
            f" Note: with --ntasks-per-node and no --ntasks, sbatch sizes the job for {tasks} tasks and Slurm"
            f" starts it on {job.nodes} nodes even when {job.max_nodes} are free; leave --ntasks-per-node"
            " out to get up to MAX nodes (one task per node)."
        )
    return ""
