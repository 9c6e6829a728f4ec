"""The spec between the wire and the model: every field carried both ways, nothing gained or lost."""

from __future__ import annotations

import pytest

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.api.spec_convert import placement_from_proto, spec_from_proto, spec_to_proto
from clusterd.errors import InvalidArgument
from clusterd.model.spec import JobSpec, PlacementPolicy, RestartPolicy
from tests.support.wire import filled


def test_every_field_survives_the_round_trip() -> None:
    wire = filled(jobs_pb2.JobSpec())
    spec = spec_from_proto(wire)
    assert spec_to_proto(spec) == wire
    assert spec.restart_policy.backoff_seconds == pytest.approx(7.000000861)
    assert spec.placement.policy is PlacementPolicy.EXACT


def test_unset_and_zero_stay_apart() -> None:
    unset = spec_from_proto(jobs_pb2.JobSpec())
    assert unset == JobSpec() and unset.export is None and unset.restart_policy.max_restarts is None
    zero = jobs_pb2.JobSpec(export="", restart_policy=jobs_pb2.RestartPolicy(max_restarts=0, on_rank_failure=False))
    spec = spec_from_proto(zero)
    assert spec.export == "" and spec.restart_policy == RestartPolicy(max_restarts=0, on_rank_failure=False)
    assert spec_to_proto(spec) == zero


def test_an_unknown_placement_policy_is_refused_or_planned_as_the_default() -> None:
    wire = jobs_pb2.JobSpec(placement=cluster_pb2.PlacementPreference(policy=42))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument) as info:
        spec_from_proto(wire)
    assert info.value.field == "spec.placement.policy"
    assert placement_from_proto(wire.placement, strict=False).policy is PlacementPolicy.UNSPECIFIED
