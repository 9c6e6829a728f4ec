"""The spec's stored form: versioned JSON holding the fields that differ from their defaults."""

from __future__ import annotations

import json

import pytest

from clusterd.model.spec import JobSpec, PlacementPolicy, PlacementPreference, RestartPolicy
from clusterd.store import codec

FULL = JobSpec(
    name="train",
    command=("python", "train.py"),
    environment={"MSG": "héllo\n"},
    restart_policy=RestartPolicy(max_restarts=0, retryable_exit_codes=(1, 2), backoff_seconds=1.5),
    placement=PlacementPreference(policy=PlacementPolicy.ANY, exclude_nodes=("node3",)),
    export="NONE",
    exclusive=True,
)


def test_a_spec_reads_back_equal() -> None:
    for spec in (FULL, JobSpec(), JobSpec(export="", restart_policy=RestartPolicy(on_rank_failure=False))):
        assert codec.spec_from(codec.spec_bytes(spec)) == spec


def test_the_stored_form_is_versioned_json_of_what_was_asked() -> None:
    assert codec.spec_bytes(JobSpec()) == b'{"version":1}'
    doc = json.loads(codec.spec_bytes(FULL))
    assert doc["version"] == codec.SPEC_VERSION and doc["restart_policy"] == {
        "backoff_seconds": 1.5,
        "max_restarts": 0,
        "retryable_exit_codes": [1, 2],
    }
    assert doc["placement"] == {"policy": "any", "exclude_nodes": ["node3"]} and doc["environment"] == {
        "MSG": "héllo\n"
    }


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (b'{"version": 2}', "version 2"),
        (b'{"name": "x"}', "version None"),
        (b'{"version": 1, "nodez": 2}', "nodez"),
        (b'{"version": 1, "placement": {"policy": "spread"}}', "spread"),
        (b"\x0a\x05train", "not a stored spec"),
        (b"[]", "version None"),
    ],
)
def test_anything_else_is_refused(blob: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        codec.spec_from(blob)
