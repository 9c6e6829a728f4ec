"""Properties over random synthetic clusters: never an unusable node, never needless leaves."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterd.topology import PlacementRequest, TopologyModel, plan
from clusterd.topology.model import fits
from clusterd.topology.synth import BusyMix, synthetic_cluster

clusters = st.builds(
    lambda leaves, per, spines, seed, full, partial, bad: TopologyModel.build(
        *synthetic_cluster(leaves, per, spines, seed=seed, mix=BusyMix(full=full, partial=partial, down=bad, drain=bad))
    ),
    leaves=st.integers(1, 12),
    per=st.integers(1, 10),
    spines=st.integers(0, 3),
    seed=st.integers(0, 10_000),
    full=st.floats(0, 0.6),
    partial=st.floats(0, 0.3),
    bad=st.floats(0, 0.1),
)

requests = st.builds(
    PlacementRequest,
    nodes=st.integers(1, 40),
    gpus_per_node=st.integers(0, 9),
    cpus_per_node=st.integers(0, 65),
    policy=st.sampled_from(["pack", "any", "exact"]),
    switch_count=st.integers(1, 4),
    max_wait_seconds=st.integers(0, 7200),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters, requests, st.data())
def test_placement_is_usable_and_minimal(model: TopologyModel, request: PlacementRequest, data: st.DataObject) -> None:
    names = sorted(model.nodes)
    excluded = tuple(data.draw(st.lists(st.sampled_from(names), max_size=5, unique=True)))
    request = PlacementRequest(**{**request.__dict__, "exclude_nodes": excluded})
    p = plan(model, request)  # never raises for a well-formed request

    if not p.feasible:
        assert not p.available_now and not p.nodes and p.explanation.startswith("cannot place")
        return
    if not p.nodes:
        assert not p.available_now
        return

    # Every chosen node is schedulable, not excluded, and has room now.
    assert len(p.nodes) == len(set(p.nodes)) == request.nodes
    for name in p.nodes:
        assert name not in excluded
        assert fits(model.node(name), request.gpus_per_node, request.cpus_per_node)
    assert p.switches == list(dict.fromkeys(model.leaf_of(n) for n in p.nodes))
    assert p.spine_hops == model.spine_levels(p.switches)

    # Never more leaves than needed: compare with the fewest leaves under any one switch.
    free = {
        leaf: sum(
            1
            for n in model.leaf_nodes(leaf)
            if n not in excluded and fits(model.node(n), request.gpus_per_node, request.cpus_per_node)
        )
        for leaf in model.leaves
    }
    if max(free.values()) >= request.nodes:
        assert len(p.switches) == 1
    fewest = min(
        (
            k
            for top in model.switch_names
            for caps in [sorted((free[x] for x in model.leaves_under(top)), reverse=True)]
            for k in range(1, len(caps) + 1)
            if sum(caps[:k]) >= request.nodes
        ),
        default=None,
    )
    assert fewest is not None and len(p.switches) == fewest

    # The switch option matches the policy.
    switch_args = [a for a in p.sbatch_args if a.startswith("--switches=")]
    if request.policy == "any" or request.nodes == 1:
        assert not switch_args
    else:
        assert len(switch_args) == 1
    if p.available_now and p.switch_limit is not None:
        assert len(p.switches) <= p.switch_limit
