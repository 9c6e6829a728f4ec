"""The health probe: a drained node goes back to service only when the operator's probe passes on it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from clusterd.errors import SlurmError, SlurmUnavailable
from clusterd.liveness import repair
from clusterd.liveness.health import Failure, NodeHealth
from clusterd.liveness.repair import UNFINISHED, HealthProbe
from clusterd.slurm.runner import CommandResult
from clusterd.slurm.types import NodeState, SlurmNode

PROBE = ("/usr/local/sbin/node-check", "--quick")


class Maintenance:
    """Records each step in order; the probe's run answers ``returncode`` (or raises ``error``)."""

    def __init__(self, returncode: int = 0) -> None:
        self.steps: list[str] = []
        self.returncode = returncode
        self.error: BaseException | None = None
        self.refuse_reserve = 0  # how many reservations to refuse first
        self.refuse_drain = 0  # how many drains to refuse first
        self.resume_error: BaseException | None = None
        self.left: dict[str, str] = {}  # reservations left behind (name -> nodes)

    async def reserve(self, name: str, node: str, user: str, seconds: float) -> None:
        self.steps.append(f"reserve {name} {node} {user}")
        if self.refuse_reserve:
            self.refuse_reserve -= 1
            raise SlurmError("scontrol", 1, "Reservation request denied: name in use")

    async def unreserve(self, name: str) -> None:
        self.steps.append(f"unreserve {name}")
        self.left.pop(name, None)

    async def extend(self, name: str, minutes: int) -> None:
        self.steps.append(f"extend {name} {minutes}")

    async def reservations(self, prefix: str) -> dict[str, str]:
        return {k: v for k, v in self.left.items() if k.startswith(prefix)}

    async def resume(self, node: str) -> None:
        self.steps.append(f"resume {node}")
        if self.resume_error is not None:
            raise self.resume_error

    async def drain(self, node: str, reason: str) -> None:
        self.steps.append(f"drain {node} {reason}")
        if self.refuse_drain:
            self.refuse_drain -= 1
            raise SlurmUnavailable("scontrol", None, "no answer within 30s")

    async def run_on(
        self, node: SlurmNode, reservation: str, command: tuple[str, ...], seconds: float
    ) -> CommandResult:
        self.steps.append(f"run {node.name} {reservation} {' '.join(command)}")
        if self.error is not None:
            raise self.error
        return CommandResult("ECC errors: 12\n", "", self.returncode)


def drained_health(node: str = "n1") -> NodeHealth:
    health = NodeHealth(event_seconds=1.0)
    health.blame(Failure(node, 1, "1", "alice", "hang", evidence=False, at=time.time() - 100))
    verdict = health.blame(Failure(node, 2, "2", "bob", "node death", evidence=True, at=time.time() - 50))
    assert verdict is not None
    health.drained_for(node, verdict)
    health.observe(node, out_of_service=True)
    return health


def prober(health: NodeHealth, m: Maintenance, state: NodeState = NodeState.DRAINED, **kw: object) -> HealthProbe:
    nodes = {"n1": SlurmNode("n1", state, reason="clusterd: failed 2 jobs")}
    args: dict[str, Any] = {"nodes": lambda: nodes, "user": "clusterd", "interval": 0.0, "timeout": 60.0, **kw}
    return HealthProbe(health, m, PROBE, **args)


async def test_a_passing_probe_returns_the_node_to_service() -> None:
    health, m = drained_health(), Maintenance()
    assert await prober(health, m).check_once() == ["n1"]
    res = "clusterd-probe-n1"
    assert m.steps == [f"reserve {res} n1 clusterd", "resume n1", f"run n1 {res} {' '.join(PROBE)}", f"unreserve {res}"]
    assert health.drained() == [] and health.summary("n1").startswith("returned to service at ")


async def test_a_failing_probe_drains_the_node_again_before_the_reservation_ends() -> None:
    health, m = drained_health(), Maintenance(returncode=3)
    assert await prober(health, m).check_once() == []
    drain = m.steps[3]
    assert drain.startswith("drain n1 clusterd: health probe failed (exit 3); failed 2 jobs of 2 users"), m.steps
    assert "ECC" not in drain  # the probe's output goes to clusterd's log, not to every user's sinfo
    assert m.steps[4:] == ["unreserve clusterd-probe-n1"]
    assert health.drained() == ["n1"] and "health probe failed (exit 3) at " in health.summary("n1")


async def test_a_probe_that_does_not_finish_counts_as_failed() -> None:
    health, m = drained_health(), Maintenance()
    m.error = SlurmUnavailable("srun", None, "no answer within 120s")
    assert await prober(health, m).check_once() == []
    assert m.steps[3].startswith("drain n1 clusterd: health probe did not finish; ")
    assert health.drained() == ["n1"]


async def test_a_reservation_left_by_an_earlier_clusterd_is_replaced() -> None:
    health, m = drained_health(), Maintenance()
    m.refuse_reserve = 1
    assert await prober(health, m).check_once() == ["n1"]
    reserve = "reserve clusterd-probe-n1 n1 clusterd"
    assert m.steps[:3] == [reserve, "unreserve clusterd-probe-n1", reserve]


async def test_no_reservation_no_resume() -> None:
    health, m = drained_health(), Maintenance()
    m.refuse_reserve = 2
    assert await prober(health, m).check_once() == []
    assert not any(s.startswith(("resume", "run")) for s in m.steps) and health.drained() == ["n1"]


@pytest.mark.parametrize("state", [NodeState.DRAINING, NodeState.DOWN, NodeState.IDLE])
async def test_only_a_drained_idle_node_is_probed(state: NodeState) -> None:
    """Jobs still ending there, or its slurmd gone: no probe yet."""
    health, m = drained_health(), Maintenance()
    assert await prober(health, m, state).check_once() == [] and m.steps == []


async def test_no_probe_on_a_follower_nor_before_its_interval() -> None:
    health, m = drained_health(), Maintenance()
    assert await prober(health, m, leading=lambda: False).check_once() == []
    assert await prober(health, m, interval=600.0).check_once() == []
    assert m.steps == []


class Deposed(Exception):
    """Not a SlurmError: what the fenced maintenance raises once another replica leads."""


@pytest.mark.parametrize("where", ["resume", "run"])
async def test_whatever_fails_after_the_resume_the_node_is_drained_again(where: str) -> None:
    health, m = drained_health(), Maintenance()
    if where == "resume":
        m.resume_error = Deposed("not the leader")
    else:
        m.error = Deposed("not the leader")
    assert await prober(health, m).check_once() == []
    drain = next(s for s in m.steps if s.startswith("drain"))
    assert drain.startswith("drain n1 clusterd: health probe did not finish; ")
    assert m.steps[-1] == "unreserve clusterd-probe-n1" and health.drained() == ["n1"]


async def test_a_stop_mid_probe_drains_the_node_before_it_stops() -> None:
    health, m = drained_health(), Maintenance()
    m.error = asyncio.CancelledError()
    with pytest.raises(asyncio.CancelledError):
        await prober(health, m).check_once()
    assert any(s.startswith("drain n1 clusterd: health probe did not finish") for s in m.steps)


async def test_a_failed_drain_is_tried_again_and_the_node_stays_clusterds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repair, "_RETRY_SECONDS", 0.0)
    health, m = drained_health(), Maintenance(returncode=3)
    m.refuse_drain = 2
    probe = prober(health, m)
    assert await probe.check_once() == []
    assert "unreserve clusterd-probe-n1" not in m.steps
    assert "extend clusterd-probe-n1 5" in m.steps
    assert not health.observe("n1", out_of_service=False)  # resumed by clusterd, not by an operator
    await probe.check_once()  # refused again: still kept, reservation extended again
    assert "unreserve clusterd-probe-n1" not in m.steps and health.drained() == ["n1"]
    assert health.due_for_probe(0.0) == []
    await probe.check_once()
    assert m.steps[-2].startswith("drain n1 clusterd: health probe failed (exit 3)")
    assert m.steps[-1] == "unreserve clusterd-probe-n1"
    assert not health.observe("n1", out_of_service=False) and health.drained() == ["n1"]


async def test_reservations_left_behind_are_drained_then_deleted_when_leading_starts() -> None:
    health, m = NodeHealth(), Maintenance()
    m.left = {"clusterd-probe-n7": "n7", "maint-other": "n8"}
    leading = [True]
    probe = prober(health, m, leading=lambda: leading[0])
    await probe.check_once()
    assert m.steps == [f"drain n7 {UNFINISHED}", "unreserve clusterd-probe-n7"]
    assert health.drained() == ["n7"]  # probed again later
    await probe.check_once()
    assert len(m.steps) == 2  # once per leadership
    leading[0] = False
    await probe.check_once()
    m.left["clusterd-probe-n9"] = "n9"  # the leader meanwhile stopped mid-probe
    leading[0] = True
    await probe.check_once()
    assert m.steps[2:] == [f"drain n9 {UNFINISHED}", "unreserve clusterd-probe-n9"]


async def test_a_left_reservation_whose_drain_fails_is_kept_and_swept_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repair, "_RETRY_SECONDS", 0.0)
    health, m = NodeHealth(), Maintenance()
    m.left, m.refuse_drain = {"clusterd-probe-n7": "n7"}, 1
    probe = prober(health, m)
    await probe.check_once()
    assert m.steps == [f"drain n7 {UNFINISHED}", "extend clusterd-probe-n7 5"]
    await probe.check_once()
    assert m.steps[2:] == [f"drain n7 {UNFINISHED}", "unreserve clusterd-probe-n7"]


async def test_a_leadership_regained_between_rounds_sweeps_again() -> None:
    health, m = NodeHealth(), Maintenance()
    probe = prober(health, m)
    await probe.check_once()
    m.left["clusterd-probe-n7"] = "n7"
    await probe.check_once()
    assert m.steps == []
    probe.lead()  # the lease said so, between two rounds
    await probe.check_once()
    assert m.steps == [f"drain n7 {UNFINISHED}", "unreserve clusterd-probe-n7"]
