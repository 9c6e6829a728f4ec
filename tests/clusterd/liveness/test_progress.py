"""Hangs and stragglers by progress: ranks that beat but stop advancing, and slow nodes."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from clusterd.liveness import table as table_module
from clusterd.liveness.detector import one_line
from clusterd.liveness.progress import ProgressRules, hang_detail, odd_ranks, stalled_ranks, stragglers
from clusterd.liveness.table import (
    MAX_STACK,
    MAX_STACK_CLAIM,
    Beat,
    LivenessTable,
    RankBeat,
    printable,
    stack_signature,
)

from .test_detection import Live, live  # noqa: F401  (the fixture)

STUCK = 'Thread MainThread:\n  File "train.py", line 10, in main\n    wait()\n'
WAITING = 'Thread MainThread:\n  File "train.py", line 12, in main\n    allreduce()\n'


def beat(
    node: str,
    step: int,
    *,
    advanced: float = 1.0,
    seconds: float = 0.1,
    first: int = 0,
    sig: str = "",
    advances: int = 3,
    gap: float = 0.0,
) -> RankBeat:
    b = RankBeat(node, 1, 0.0, 0.0, step=step, step_seconds=seconds, advanced=advanced, first_step=first)
    b.stack_sig, b.advances, b.advance_gap = sig, advances, gap
    return b


def test_a_rank_is_stalled_after_k_step_times_and_never_before_the_floor() -> None:
    rules = ProgressRules(hang_factor=10, hang_floor_seconds=5)
    ranks = {0: beat("a", 9, advanced=100.0, seconds=1.0), 1: beat("b", 9, advanced=100.0, seconds=0.1)}
    assert stalled_ranks(ranks, rules, now=104.0) == []  # under the floor
    assert stalled_ranks(ranks, rules, now=106.0) == [1]  # rank 0's own pace gives it 10 s
    assert stalled_ranks(ranks, rules, now=111.0) == [0, 1]
    assert stalled_ranks({0: beat("a", -1, advanced=0.0)}, rules, now=1e9) == []  # no step yet: restoring
    assert stalled_ranks(ranks, ProgressRules(hang_factor=0), now=1e9) == []
    assert stalled_ranks({0: beat("a", 9, advanced=100.0, advances=2)}, rules, now=1e9) == []  # no pace yet


def test_a_rank_that_reports_its_step_only_at_save_is_judged_by_the_pace_clusterd_sees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reviewer's case: a healthy job whose only step report is save(step) every 10 minutes
    (each saying 1 s per step) was declared hung 300 s after each save."""
    clock = [0.0]
    monkeypatch.setattr(table_module.time, "monotonic", lambda: clock[0])
    table = LivenessTable()
    rules = ProgressRules(hang_factor=10, hang_floor_seconds=300)
    rank = None
    for t in range(0, 1801, 10):  # a beat every 10 s; the step moves at each save
        clock[0] = float(t)
        claim = Beat(
            1,
            "7",
            0,
            0,
            1,
            "n1",
            42,
            step=t // 600 * 600,
            committed_step=-1,
            restored=True,
            exiting=False,
            exit_code=0,
            step_seconds=1.0,
        )
        run, _ = table.record(claim, interval=10, hang_timeout=60)
        rank = run.ranks[0]
    assert rank is not None and rank.advances == 3 and rank.advance_gap == pytest.approx(600)
    assert stalled_ranks({0: rank}, rules, now=1800 + 301) == []  # the next save is due at 2400
    assert stalled_ranks({0: rank}, rules, now=1800 + 5999) == []
    assert stalled_ranks({0: rank}, rules, now=1800 + 6001) == [0]  # ten of its own gaps: hung


def test_the_rank_whose_stack_differs_is_named_when_all_stopped() -> None:
    stuck, waiting = stack_signature(STUCK), stack_signature(WAITING)
    ranks = {r: beat(f"n{r}", 9, sig=waiting) for r in range(4)}
    ranks[2].stack_sig = stuck
    assert odd_ranks(ranks, [0, 1, 2, 3]) == [2]
    assert odd_ranks(ranks, [2]) == [2]  # stopped while the others went on
    ranks[2].stack_sig = waiting
    ranks[3].step = 8  # no stack stands out: the rank behind
    assert odd_ranks(ranks, [0, 1, 2, 3]) == [3]
    ranks[3].step = 9
    assert odd_ranks(ranks, [0, 1, 2, 3]) == [0, 1, 2, 3]


def test_a_node_running_slower_is_a_straggler_once_the_window_is_done() -> None:
    rules = ProgressRules(straggler_factor=1.3, straggler_window_steps=20)
    fast = {0: beat("a", 30, seconds=0.1), 1: beat("a", 30, seconds=0.1)}
    assert stragglers({**fast, 2: beat("b", 30, seconds=0.2), 3: beat("b", 30, seconds=0.21)}, rules) == {"b": 2.05}
    assert stragglers({**fast, 2: beat("b", 15, seconds=0.2)}, rules) == {}  # window not done
    assert stragglers({**fast, 2: beat("b", 30, seconds=0.12)}, rules) == {}  # 1.2x: within the tolerance
    three = {0: beat("a", 30), 1: beat("b", 30, seconds=0.11), 2: beat("c", 30, seconds=0.3)}
    assert stragglers(three, rules) == {"c": 2.73}


async def test_ranks_that_beat_but_stop_advancing_are_hung_with_the_stuck_stack(live: Live) -> None:  # noqa: F811
    live.daemon.detector._progress = ProgressRules(hang_factor=10, hang_floor_seconds=0.4)
    job_id, record, token = await live.submit()
    ids = (job_id, record, token)
    for step in range(5):
        for rank in (0, 1):
            reply = await live.beat(*ids, rank, step=step, step_seconds=0.01)
            assert not reply.want_stack
    asked = False
    for step in range(5, 12):  # rank 1 is stuck at step 4, its beat thread beating
        await asyncio.sleep(0.1)
        await live.beat(*ids, 0, step=step, step_seconds=0.01)
        asked = (await live.beat(*ids, 1, step=4, step_seconds=0.01)).want_stack
        assert await live.daemon.detector.check_once() == []
    assert asked  # the detector asked for the stacks first
    assert await live.daemon.detector.check_once() == []  # waiting for every rank's stack
    reply = await live.beat(*ids, 1, step=4, stack=STUCK)
    assert not reply.want_stack  # once sent
    assert await live.daemon.detector.check_once() == []
    await live.beat(*ids, 0, step=13, stack=WAITING)
    (found,) = await live.daemon.detector.check_once()
    assert found.cause == "RANK_HUNG" and found.detected_by == "progress" and found.ranks == (1,)
    job = await live.status(job_id)
    (restart,) = job.restarts
    assert "rank 1 on node2 at step 4" in restart.detail and "line 10, in main" in restart.detail
    assert live.slurm.calls["requeue"] == 1 and live.slurm.calls["set_node_down"] == 0
    assert live.slurm.calls["drain_node"] == 0  # the job's word never takes its node


def test_a_stack_keeps_no_control_characters() -> None:
    assert printable("a\x1b[2Jb\n\tc\x07") == "a?[2Jb\n\tc?"


async def test_a_stack_that_was_not_asked_for_is_not_kept(live: Live) -> None:  # noqa: F811
    job_id, record, token = await live.submit()
    await live.beat(job_id, record, token, 0, step=1, stack="x" * 10_000)
    run = live.daemon.liveness.get(record, job_id)
    assert run is not None and run.ranks[0].stack == "" and run.ranks[0].stack_sig == ""


async def test_a_stack_over_the_limit_is_refused_naming_the_field(live: Live) -> None:  # noqa: F811
    job_id, record, token = await live.submit()
    await live.beat(job_id, record, token, 0, step=1, stack="x" * MAX_STACK_CLAIM)  # at the limit: taken
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await live.beat(job_id, record, token, 0, step=1, stack="x" * (MAX_STACK_CLAIM + 1))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "stack" in (err.value.details() or "")


def test_only_the_kept_part_of_a_stack_is_hashed() -> None:
    """Two ranks whose kept text is the same agree, whatever the rank sent past it."""
    table = LivenessTable()
    head = STUCK + "  # " + "x" * MAX_STACK  # the main thread's text runs past the kept part
    for rank, tail in ((0, ""), (1, '\n  File "other.py", line 1, in f\n')):
        claim = Beat(1, "7", 0, rank, 2, "n1", 42, 1, -1, True, False, 0, stack=head[:MAX_STACK] + tail)
        run, _ = table.record(claim, interval=1, hang_timeout=60)
        run.stacks_asked = 1.0
        table.record(claim, interval=1, hang_timeout=60)
    (run,) = table.runs()
    assert run.ranks[0].stack_sig == run.ranks[1].stack_sig != ""
    assert len(run.ranks[1].stack) == MAX_STACK


def test_clusterd_keeps_as_much_of_a_stack_as_the_client_sends() -> None:
    from clusterctl import heartbeat

    assert heartbeat.MAX_STACK == MAX_STACK < MAX_STACK_CLAIM


def test_the_detail_shows_the_innermost_frames_of_the_main_thread() -> None:
    ranks = {0: beat("a", 9), 1: beat("b", 9)}
    ranks[1].stack = STUCK + "\n" + 'Thread worker:\n  File "loader.py", line 3, in run\n' + "    x()\n" * 2000
    detail = hang_detail(ranks, [1], [1], 400.0)
    assert "wait()" in detail and "loader.py" not in detail


def test_a_detail_is_logged_on_one_line() -> None:
    """A stack is the job's text: a newline in it must not start a log line that looks like clusterd's."""
    forged = "rank 1 stuck\nERROR clusterd: node n1 drained by admin"
    assert one_line(forged) == "rank 1 stuck\\nERROR clusterd: node n1 drained by admin"
    assert "\n" not in one_line(forged + "\r\n")


@pytest.mark.parametrize("seconds", [-1.0, float("nan"), float("inf"), 1e9])
async def test_a_step_time_out_of_range_is_refused_naming_the_field(live: Live, seconds: float) -> None:  # noqa: F811
    job_id, record, token = await live.submit()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await live.beat(job_id, record, token, 0, step=1, step_seconds=seconds)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "step_seconds" in (err.value.details() or "")


async def test_a_slow_node_is_named_in_the_status_and_counted(live: Live) -> None:  # noqa: F811
    from clusterd.observability.metrics import STRAGGLERS

    before = STRAGGLERS.labels(node="node2")._value.get()
    job_id, record, token = await live.submit()
    for step in range(0, 25):
        await live.beat(job_id, record, token, 0, step=step, step_seconds=0.1)
        await live.beat(job_id, record, token, 1, step=step, step_seconds=0.2)
        assert await live.daemon.detector.check_once() == []  # a straggler is named, never acted on
    job = await live.status(job_id)
    assert [(s.node, s.ratio) for s in job.stragglers] == [("node2", 2.0)]
    assert STRAGGLERS.labels(node="node2")._value.get() == before + 1  # once per verdict, not per check
    assert live.slurm.calls["requeue"] == 0 and live.slurm.calls["drain_node"] == 0


async def test_ranks_holding_for_a_stop_are_not_hung(live: Live) -> None:  # noqa: F811
    live.daemon.detector._progress = ProgressRules(hang_factor=10, hang_floor_seconds=0.2)
    job_id, record, token = await live.submit()
    for rank in (0, 1):
        await live.beat(job_id, record, token, rank, step=3, step_seconds=0.01)
    for _ in range(5):
        await asyncio.sleep(0.1)
        await live.beat(job_id, record, token, 0, step=3, stopping_step=3)  # holds, waiting for rank 1
        reply = await live.beat(job_id, record, token, 1, step=3)
        assert not reply.want_stack
        assert await live.daemon.detector.check_once() == []
