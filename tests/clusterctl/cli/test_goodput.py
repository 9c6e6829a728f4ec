"""``clusterctl goodput``: the ratio, the parts (adding up to the wall time), --json's stable keys."""

from __future__ import annotations

import json

from .conftest import Runner


def test_goodput_json_has_the_contract_keys(cli: Runner) -> None:
    r = cli("goodput", "42", "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert data["ettr"] == 0.8 and data["wall_seconds"] == 100
    assert set(data["breakdown"]) == {
        "productive",
        "queue",
        "start_restore",
        "checkpoint_stall",
        "detection",
        "restart",
        "lost",
    }
    assert sum(data["breakdown"].values()) == data["wall_seconds"]
    assert data["checkpoint_interval_seconds"] == 120


def test_goodput_human_view(cli: Runner) -> None:
    r = cli("goodput", "42")
    assert r.code == 0, r.err
    assert "ETTR 80.0%" in r.out and "lost" in r.out and "00:02:00" in r.out


def test_goodput_of_an_unknown_job_is_an_error_not_a_traceback(cli: Runner) -> None:
    r = cli("goodput", "999")
    assert r.code != 0 and "not found" in r.err and "Traceback" not in r.err
