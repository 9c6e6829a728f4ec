"""The heartbeat sender against a fake JobService on a unix socket (tests.support.heartbeat).

In-process tests drive a :class:`HeartbeatSender` directly; everything that touches the
process-wide sender runs in a child Python process (the runtime's exit status: test_runtime.py).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from clusterctl import heartbeat
from clusterctl.heartbeat import DEFAULT_INTERVAL, HeartbeatConfig, HeartbeatSender
from tests.support.heartbeat import FakeJobService, HeartbeatRequest, heartbeat_env, run_child, serve


def sender(sock: Path, **extra: str) -> HeartbeatSender:
    config = HeartbeatConfig.from_env(heartbeat_env(sock, **extra))
    assert config is not None
    return HeartbeatSender(config, start_grace=0)


def test_config_from_env() -> None:
    config = HeartbeatConfig.from_env(heartbeat_env(Path("/x.sock")))
    assert config == HeartbeatConfig(
        addr="unix:/x.sock",
        token="hb-token",
        record_id=42,
        job_id="1234",
        restart_count=2,
        rank=1,
        world_size=2,
        node="node7",
        interval=0.2,
    )
    assert HeartbeatConfig.from_env(heartbeat_env(Path("/x.sock"), CLUSTERCTL_HEARTBEAT="0")) is None
    assert HeartbeatConfig.from_env({"CLUSTERCTL_HEARTBEAT_ADDR": "unix:/x"}) is None  # no token: not configured
    assert HeartbeatConfig.from_env({}) is None
    odd = HeartbeatConfig.from_env(
        {
            "CLUSTERCTL_HEARTBEAT_ADDR": "h:1",
            "CLUSTERCTL_HEARTBEAT_TOKEN": "t",
            "CLUSTERCTL_HEARTBEAT_INTERVAL": "nan",
            "CLUSTERCTL_RECORD_ID": "-3",
        }
    )
    assert odd is not None and (odd.interval, odd.record_id, odd.rank, odd.world_size) == (DEFAULT_INTERVAL, 0, 0, 1)
    tiny = HeartbeatConfig.from_env(heartbeat_env(Path("/x"), CLUSTERCTL_HEARTBEAT_INTERVAL="0.000001"))
    assert tiny is not None and tiny.interval == 0.05


def test_beats_carry_the_fields_from_the_environment(sock: Path, fake: FakeJobService) -> None:
    s = sender(sock).start()
    try:
        _, first = fake.wait_for(lambda r: True)
        assert (first.record_id, first.token, first.job_id, first.restart_count) == (42, "hb-token", "1234", 2)
        assert (first.rank, first.world_size, first.node, first.pid) == (1, 2, "node7", os.getpid())
        assert (first.step, first.committed_step, first.restored, first.exiting) == (-1, -1, False, False)
        s.report_committed(9)
        s.report_step(12)
        _, later = fake.wait_for(lambda r: r.step == 12 and r.committed_step == 9)
        assert not later.exiting
        before = len(fake.beats)
        time.sleep(0.7)  # CLUSTERCTL_HEARTBEAT_INTERVAL=0.2: a few more beats, not dozens
        assert 2 <= len(fake.beats) - before <= 6
    finally:
        s.finish(0)
    assert fake.requests()[-1].exiting and fake.requests()[-1].exit_code == 0


def test_the_reply_interval_wins(sock: Path) -> None:
    fake = FakeJobService(interval=0.05)
    with serve(sock, fake):
        s = sender(sock, CLUSTERCTL_HEARTBEAT_INTERVAL="30").start()
        try:
            fake.wait_for(lambda r: True)
            time.sleep(0.6)
            assert len(fake.beats) >= 6, "a 30 s interval overridden by the server's 0.05 s"
            assert s.interval == 0.05
        finally:
            s.finish(0)
    slow = FakeJobService(interval=30)
    other = sock.with_name("slow.sock")  # a fresh path: nothing of the first server's shutdown touches it
    with serve(other, slow):
        s = sender(other).start()  # asks for 0.2 s, the server says 30 s
        try:
            slow.wait_for(lambda r: True)
            time.sleep(0.6)
            assert len(slow.beats) == 1
        finally:
            s.finish(0)


def test_the_first_step_after_restore_is_sent_at_once(sock: Path, fake: FakeJobService) -> None:
    s = sender(sock, CLUSTERCTL_HEARTBEAT_INTERVAL="30").start()
    try:
        fake.wait_for(lambda r: True)
        s.report_committed(99)
        t0 = time.monotonic()
        s.report_restored()
        arrived, beat = fake.wait_for(lambda r: r.restored, timeout=2)
        assert arrived - t0 < 0.5 and beat.committed_step == 99 and beat.step == -1
        t0 = time.monotonic()
        s.report_step(100)
        arrived, beat = fake.wait_for(lambda r: r.step == 100, timeout=2)
        assert arrived - t0 < 0.5 and beat.restored
        n = len(fake.beats)
        s.report_step(101)  # later steps wait for the interval
        time.sleep(0.5)
        assert len(fake.beats) == n
    finally:
        s.finish(0)


def test_the_sender_connects_after_restore_or_a_grace_period(sock: Path, fake: FakeJobService) -> None:
    config = HeartbeatConfig.from_env(heartbeat_env(sock))
    assert config is not None
    idle = HeartbeatSender(config, start_grace=0.6).start()
    restored = HeartbeatSender(config, start_grace=30).start()
    try:
        time.sleep(0.3)
        assert fake.beats == []  # neither restored nor stepped yet: grpc not even imported for them
        restored.report_restored()
        fake.wait_for(lambda r: r.restored, timeout=2)
        fake.wait_for(lambda r: not r.restored, timeout=2, what="a beat once the grace period ran out")
    finally:
        idle.finish(0)
        restored.finish(0)


def test_stop_in_a_reply_is_seen(sock: Path) -> None:
    fake = FakeJobService(stop=True)
    with serve(sock, fake):
        s = sender(sock).start()
        try:
            fake.wait_for(lambda r: True)
            deadline = time.monotonic() + 5
            while not s.stop_requested() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert s.stop_requested()
        finally:
            s.finish(0)


def test_beats_carry_the_step_time_and_the_stacks_when_asked(sock: Path, fake: FakeJobService) -> None:
    blocked = threading.Event()

    def stuck_here() -> None:  # a worker thread whose frame the stacks must show
        blocked.wait(10)

    worker = threading.Thread(target=stuck_here, name="stuck-worker")
    worker.start()
    with serve(sock, fake):
        s = sender(sock).start()
        try:
            for step in range(6):
                s.report_step(step)
                time.sleep(0.02)
            _, req = fake.wait_for(lambda r: r.step == 5 and r.step_seconds > 0, what="a beat with a step time")
            assert 0.015 < req.step_seconds < 0.2 and not req.stack  # stacks only when asked
            fake.want_stack = True
            _, req = fake.wait_for(lambda r: bool(r.stack), what="a beat with the stacks")
            assert req.stack.startswith("Thread MainThread:") and "stuck_here" in req.stack
            assert "clusterctl-heartbeat" not in req.stack  # not the beat thread's own
        finally:
            blocked.set()
            worker.join()
            s.finish(0)


def test_stacks_keep_the_innermost_frames_of_a_deep_main_thread() -> None:
    """A deep main thread (a model's recursion, a framework's layers) keeps where it stands now."""
    got: list[str] = []

    def deeper(depth: int) -> None:  # two functions in turn: traceback does not fold them
        deep_wait(depth - 1)

    def deep_wait(depth: int) -> None:
        if depth:
            deeper(depth)
            return
        taker = threading.Thread(target=lambda: got.append(heartbeat.stacks()))  # as the beat thread does
        taker.start()
        taker.join()

    deep_wait(300)
    (out,) = got
    assert out.startswith("Thread MainThread:") and len(out) <= heartbeat.MAX_STACK
    assert "in deep_wait\n    taker." in out.split("\n\n", 1)[0]  # where the main thread stands now


def test_a_failure_to_take_the_stacks_never_escapes(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> list[str]:
        raise RuntimeError("a frame's repr failed")

    monkeypatch.setattr(heartbeat.traceback, "format_stack", broken)
    got: list[str] = []
    taker = threading.Thread(target=lambda: got.append(heartbeat.stacks()))  # as the beat thread does
    taker.start()
    taker.join()
    assert got == ["(stacks unavailable: RuntimeError)"]


def test_a_claim_goes_out_at_once_and_the_named_stop_step_is_heard(sock: Path) -> None:
    fake = FakeJobService(stopping=True, stop_step=9)
    with serve(sock, fake):
        s = sender(sock, CLUSTERCTL_HEARTBEAT_INTERVAL="60").start()
        try:
            s.report_restored()
            fake.wait_for(lambda r: r.restored, what="the restored beat")
            s.report_stopping(0)  # step 0 is a step: sent, not taken for "not stopping"
            _, claim = fake.wait_for(lambda r: r.HasField("stopping_step"), what="the claim")
            assert claim.stopping_step == 0
            news = s.wait_stop(10)
            assert (news.under_way, news.step, news.refused) == (True, 9, False)
        finally:
            s.finish(0)
    assert not fake.requests()[0].HasField("stopping_step")  # no claim before the rank holds


def test_a_claim_answered_without_a_stop_ends_the_wait_at_once(sock: Path, fake: FakeJobService) -> None:
    """A clusterd that does not take claims answers as before: the rank stops where it holds."""
    s = sender(sock, CLUSTERCTL_HEARTBEAT_INTERVAL="60").start()
    try:
        s.report_stopping(3)
        news = s.wait_stop(60)
        assert (news.step, news.refused) == (None, True)
    finally:
        s.finish(0)


def test_a_run_being_restarted_ends_the_wait_for_a_stop_step(sock: Path) -> None:
    fake = FakeJobService(stop=True, stopping=True)  # a peer failed while the ranks held
    with serve(sock, fake):
        s = sender(sock, CLUSTERCTL_HEARTBEAT_INTERVAL="60").start()
        try:
            s.report_stopping(3)
            news = s.wait_stop(60)
            assert news.step is None and s.stop_requested()
        finally:
            s.finish(0)


def test_waiting_for_a_stop_step_is_bounded(sock: Path) -> None:
    fake = FakeJobService(stopping=True)  # a peer never holds: no step is named
    with serve(sock, fake):
        s = sender(sock).start()
        try:
            s.report_stopping(3)
            started = time.monotonic()
            news = s.wait_stop(0.3)
            assert time.monotonic() - started >= 0.3
            assert (news.under_way, news.step, news.refused) == (True, None, False)
        finally:
            s.finish(0)


def report_timings(s: HeartbeatSender, calls: int = 2000) -> list[float]:
    times = []
    for i in range(calls):
        t0 = time.perf_counter()
        s.report_step(i)
        s.report_committed(i)
        if i % 500 == 0:
            s.report_restored()
        times.append(time.perf_counter() - t0)
    return times


@pytest.mark.parametrize("server", ["absent", "unimplemented", "stopped"])
def test_a_missing_service_never_raises_or_delays_training(sock: Path, server: str) -> None:
    s = sender(sock, CLUSTERCTL_HEARTBEAT_INTERVAL="0.05")
    if server == "unimplemented":  # an older clusterd: no Heartbeat method
        with serve(sock, None):
            s.start()
            time.sleep(0.3)
            times = report_timings(s)
    elif server == "stopped":
        fake = FakeJobService()
        with serve(sock, fake):
            s.start()
            fake.wait_for(lambda r: True)
        time.sleep(0.2)
        times = report_timings(s)
    else:
        s.start()
        time.sleep(0.3)
        times = report_timings(s)
    assert statistics.median(times) < 1e-3 and max(times) < 0.02, (statistics.median(times), max(times))
    assert not s.stop_requested()
    t0 = time.monotonic()
    s.finish(3)  # the exiting beat has nowhere to go: bounded by FINAL_DEADLINE
    assert time.monotonic() - t0 < 1.5


def test_values_out_of_protobuf_range_drop_beats_not_the_thread(
    sock: Path, fake: FakeJobService, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashes: list[object] = []
    monkeypatch.setattr(threading, "excepthook", crashes.append)
    s = sender(sock, SLURM_PROCID=str(1 << 40), SLURM_NTASKS=str(1 << 41)).start()  # ranks beyond uint32
    s.report_step(1 << 70)  # beyond int64
    time.sleep(0.5)
    s.finish(0)
    assert crashes == [] and fake.beats == [] and s.sent == 0


def test_off_switch_and_no_configuration_send_nothing(sock: Path, fake: FakeJobService) -> None:
    code = """
    from clusterctl import heartbeat
    assert heartbeat.start() is None and heartbeat.start() is None
    heartbeat.report_step(1); heartbeat.report_restored(); heartbeat.report_committed(1)
    assert not heartbeat.stop_requested()
    import sys; assert "grpc" not in sys.modules, "unconfigured heartbeats import nothing heavy"
    """
    for env in (heartbeat_env(sock, CLUSTERCTL_HEARTBEAT="0"), {}):
        done = run_child(code, env)
        assert done.returncode == 0, done.stderr
    time.sleep(0.3)
    assert fake.beats == []


def test_reports_before_start_and_forked_children_send_nothing(sock: Path, fake: FakeJobService) -> None:
    code = """
    import os, sys, time
    from clusterctl import heartbeat
    heartbeat.report_step(1)  # no sender yet: goes nowhere, starts nothing
    assert heartbeat._sender is None
    assert heartbeat.start() is not None
    heartbeat.report_step(2)
    pid = os.fork()
    if pid == 0:  # a DataLoader-style worker: its reports and its exit go nowhere
        assert heartbeat.start() is None
        heartbeat.report_step(999)
        heartbeat.finish(7)
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7
    heartbeat.report_step(3)
    time.sleep(0.3)
    heartbeat.finish(0)
    """
    done = run_child(code, heartbeat_env(sock))
    assert done.returncode == 0, done.stderr
    beats = fake.requests()
    assert {b.pid for b in beats} == {beats[0].pid}
    assert {b.step for b in beats} <= {2, 3} and beats[-1].exiting
    assert (beats[-1].exit_code, beats[-1].step) == (0, 3)
    assert [b.exiting for b in beats].count(True) == 1


class Replica(FakeJobService):
    """A clusterd replica: only the leader takes beats, a follower answers UNAVAILABLE like clusterd's."""

    def __init__(self, *, leader: bool) -> None:
        super().__init__()
        self.leader = leader
        self.refused = 0

    def Heartbeat(self, request: HeartbeatRequest, context: Any) -> Any:
        if not self.leader:
            self.refused += 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "follower; the leader is another replica")
        return super().Heartbeat(request, context)


def test_beats_rotate_to_the_leader_among_several_addresses(tmp_path: Path) -> None:
    a, b = Replica(leader=False), Replica(leader=True)
    with serve(tmp_path / "a.sock", a), serve(tmp_path / "b.sock", b):
        addrs = f"unix:{tmp_path / 'a.sock'},unix:{tmp_path / 'b.sock'}"
        config = HeartbeatConfig.from_env(heartbeat_env(tmp_path / "a.sock", CLUSTERCTL_HEARTBEAT_ADDR=addrs))
        assert config is not None
        s = HeartbeatSender(config, start_grace=0).start()
        b.wait_for(lambda r: True, what="a beat at the leader b")
        assert a.refused == 1  # one beat went to the follower, the next one to the next address
        a.leader, b.leader = True, False  # b is deposed, a leads
        a.wait_for(lambda r: True, what="a beat at the new leader a")
        a.leader, b.leader = False, True  # and back, right before the exit: the exiting beat tries the next one
        s.finish(3)
        b.wait_for(lambda r: r.exiting and r.exit_code == 3, timeout=2, what="the exiting beat at the leader")
        assert not any(r.exiting for r in a.requests())


def test_beats_carry_the_save_stall_and_replies_the_advised_interval(sock: Path, fake: FakeJobService) -> None:
    fake.checkpoint_interval = 90.0
    s = sender(sock).start()
    try:
        s.report_save_stall(1.5)
        s.report_save_stall(float("nan"))  # not a measurement: dropped
        s.report_save_stall(0.5)
        s.report_step(3)
        _, beat = fake.wait_for(lambda r: r.saves == 2)
        assert beat.save_stall_seconds == 2.0
        deadline = time.monotonic() + 5
        while s.checkpoint_interval is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert s.checkpoint_interval == 90.0
    finally:
        s.finish(0)
