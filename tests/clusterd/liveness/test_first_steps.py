"""A run's first step is noted on its record beside the beat's reply: one task per job at most."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from clusterd.config import LivenessConfig
from clusterd.liveness.heartbeats import HeartbeatService
from clusterd.liveness.table import Beat, LivenessTable, Run


def _beat(relaunch: int) -> Beat:
    return Beat(7, "100", 0, 0, 2, "n1", 1000 + relaunch, 5, -1, False, False, 0, 0.0, 0, relaunch=relaunch)


async def test_first_steps_claimed_while_one_is_noted_make_one_more_note_not_one_each() -> None:
    release = asyncio.Event()
    noted: list[int] = []

    async def note(run: Run) -> None:
        await release.wait()  # the record's lock, held by a restart being decided
        noted.append(run.relaunch)

    table = LivenessTable()
    service = HeartbeatService(cast(Any, None), table, LivenessConfig(), note, jobs=lambda _job: None)
    for relaunch in range(1000):  # a job's beats claiming ever newer runs
        run, first = table.record(_beat(relaunch), interval=1.0, hang_timeout=60.0)
        assert first
        service._note_first_step(run)
        await asyncio.sleep(0)
    assert len(service._noting) == 1
    release.set()
    await service.drain(5.0)
    assert noted == [0, 999]  # the one under way, then the newest


async def test_shutdown_gives_up_a_note_still_waiting() -> None:
    async def note(run: Run) -> None:
        await asyncio.Event().wait()  # never gets the record

    table = LivenessTable()
    service = HeartbeatService(cast(Any, None), table, LivenessConfig(), note, jobs=lambda _job: None)
    run, _ = table.record(_beat(0), interval=1.0, hang_timeout=60.0)
    service._note_first_step(run)
    await asyncio.sleep(0)
    await service.drain(0.1)
    assert not service._noting
    run, _ = table.record(_beat(1), interval=1.0, hang_timeout=60.0)
    service._note_first_step(run)  # nothing of the job's was left waiting without a task
    assert len(service._noting) == 1
    await service.drain(0.1)
