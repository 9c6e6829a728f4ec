"""The health probe's Slurm commands, run through the real runner against stand-in binaries."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from clusterd.errors import SlurmError
from clusterd.slurm.maintenance import CommandsMaintenance
from clusterd.slurm.runner import CommandRunner
from clusterd.slurm.types import NodeState, SlurmNode

N1 = SlurmNode("n1", NodeState.DRAINED)


def stand_ins(tmp_path: Path, srun: str = "exit 0") -> Path:
    """``scontrol`` and ``srun`` that log their arguments, one call a line; srun then runs ``srun``."""
    log = tmp_path / "calls"
    for name, tail in (("scontrol", "exit 0"), ("srun", srun)):
        script = tmp_path / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n{tail}\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return log


async def test_reserve_resume_probe_drain_unreserve(tmp_path: Path) -> None:
    log = stand_ins(tmp_path, srun="echo ECC; exit 3")
    m = CommandsMaintenance(CommandRunner(bin_dir=str(tmp_path)))
    await m.reserve("clusterd-probe-n1", "n1", "clusterd", 90.0)
    await m.resume("n1")
    result = await m.run_on(N1, "clusterd-probe-n1", ("/sbin/check", "--gpu"), 90.0)
    await m.drain("n1", "clusterd: health probe failed (exit 3)")
    await m.unreserve("clusterd-probe-n1")
    assert (result.returncode, result.stdout) == (3, "ECC\n")
    assert log.read_text().splitlines() == [
        "scontrol create reservation reservationname=clusterd-probe-n1 nodes=n1 starttime=now duration=5 "
        "users=clusterd flags=maint",
        "scontrol update nodename=n1 state=resume",
        "srun --reservation=clusterd-probe-n1 --nodelist=n1 --nodes=1 --ntasks=1 --exclusive --time=2 --immediate=30 "
        "--job-name=clusterd-health-probe --chdir=/ -- /sbin/check --gpu",
        "scontrol update nodename=n1 state=drain reason=clusterd: health probe failed (exit 3)",
        "scontrol delete reservation=clusterd-probe-n1",
    ]


async def test_a_probe_that_outlives_its_limit_is_given_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterd.slurm import maintenance

    stand_ins(tmp_path, srun="exec sleep 30")
    monkeypatch.setattr(maintenance, "_ALLOCATE_SECONDS", 0)
    monkeypatch.setattr(maintenance, "_SLACK_SECONDS", 0.0)
    m = CommandsMaintenance(CommandRunner(bin_dir=str(tmp_path)))
    with pytest.raises(SlurmError, match="no answer within"):
        await m.run_on(N1, "clusterd-probe-n1", ("/bin/true",), 0.5)


def test_the_reservation_outlasts_everything_the_probe_waits_for() -> None:
    """Resume (30 s) + probe (300 s) + node wait (30 s) + srun slack (30 s) + drain (30 s) + margin (60 s)."""
    from clusterd.slurm.maintenance import reservation_minutes

    assert reservation_minutes(300.0, 30.0) == 8  # 480 s
    assert reservation_minutes(300.0, 31.0) == 9
    assert reservation_minutes(1.0, 1.0) == 3


async def test_reservations_left_behind_are_listed(tmp_path: Path) -> None:
    stand_ins(tmp_path)
    (tmp_path / "scontrol").write_text(
        "#!/bin/sh\necho 'ReservationName=clusterd-probe-n1 StartTime=2026-01-01T00:00:00 Nodes=n1 NodeCnt=1'\n"
        "echo 'ReservationName=maint Nodes=n2 NodeCnt=1'\n"
    )
    m = CommandsMaintenance(CommandRunner(bin_dir=str(tmp_path)))
    assert await m.reservations("clusterd-probe-") == {"clusterd-probe-n1": "n1"}


async def test_the_probe_gets_the_whole_node_in_its_own_partition(tmp_path: Path) -> None:
    """A node outside the default partition, with GPUs: the probe asks for its partition and all its GPUs."""
    log = stand_ins(tmp_path)
    m = CommandsMaintenance(CommandRunner(bin_dir=str(tmp_path)))
    node = SlurmNode("g1", NodeState.DRAINED, gpus_total=8, partitions=("gpu", "debug"))
    await m.run_on(node, "clusterd-probe-g1", ("/sbin/check",), 60.0)
    assert log.read_text().splitlines() == [
        "srun --reservation=clusterd-probe-g1 --partition=gpu --nodelist=g1 --nodes=1 --ntasks=1 --exclusive "
        "--gres=gpu:8 --time=1 --immediate=30 --job-name=clusterd-health-probe --chdir=/ -- /sbin/check"
    ]


async def test_a_reservation_is_extended_from_now(tmp_path: Path) -> None:
    """Its start is not needed (a reservation left by another clusterd): the end is set from now."""
    log = stand_ins(tmp_path)
    await CommandsMaintenance(CommandRunner(bin_dir=str(tmp_path))).extend("clusterd-probe-n1", 5)
    assert log.read_text().splitlines() == ["scontrol update reservationname=clusterd-probe-n1 endtime=now+5minutes"]
