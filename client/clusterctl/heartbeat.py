"""Per-rank heartbeats to clusterd: liveness, step progress and the exit status of a training process.

Why: Slurm notices a dead node after SlurmdTimeout (tens of seconds) and never notices a rank
that hangs (a stuck collective, SIGSTOP) or that crashed while its peers wait. clusterd's failure
detector learns all three from these beats: one small unary ``JobService.Heartbeat`` call per
interval from a daemon thread, with the newest step the rank reported and its recent step time, the
newest committed checkpoint step it saw, whether ``restore()`` returned, how long its saves stalled
training, and one last beat with the exit status. A loop that does not checkpoint every step reports
its steps with one line, ``clusterctl.heartbeat.report_step(step)``. When the ranks stop advancing
while they beat, clusterd's reply asks for the process's Python stacks, which the beat thread takes
from inside the process (``sys._current_frames``: no privilege, nothing to install) and sends in the
next beat. clusterd's reply may also carry the checkpoint interval it advises
(:func:`checkpoint_interval`), which ``CheckpointManager(interval="auto")`` follows.

Configured only from the environment clusterd puts in the job; with no configuration every call
here is a cheap no-op (this module imports nothing heavy; grpc is imported by the sender thread):

- ``CLUSTERCTL_HEARTBEAT_ADDR`` (``unix:/path`` or ``host:port``, or a comma-separated list of
  clusterd replicas) and ``CLUSTERCTL_HEARTBEAT_TOKEN`` (both required), ``CLUSTERCTL_RECORD_ID``,
  ``CLUSTERCTL_HEARTBEAT_INTERVAL`` (seconds, default 1.0; the server's reply overrides it); TLS
  from CLUSTERCTL_CA/CERT/KEY as in :mod:`clusterctl.client`.
- ``CLUSTERCTL_RELAUNCH``: which in-place relaunch of the run (``--spare-nodes``) this step is.
- Slurm's SLURM_JOB_ID, SLURM_RESTART_COUNT, SLURM_PROCID/SLURM_NTASKS, SLURMD_NODENAME.
- ``CLUSTERCTL_HEARTBEAT=0`` turns it off.

What can go wrong, and what happens then: a down or old service (UNAVAILABLE, UNIMPLEMENTED) only
means beats are dropped, logged once at INFO. With several replicas only the leader takes beats (a
follower answers UNAVAILABLE): a beat answered UNAVAILABLE or DEADLINE_EXCEEDED sends the next one
to the next address in the list, so the sender finds the leader within one round (no retries inside
a beat: another comes every interval anyway; only the exiting beat tries each address once).
Nothing here raises into the trainer or blocks it (a report is a field update under a lock). A
forked child (DataLoader workers) never inherits the sender and starts none;
``multiprocessing`` children do not start one either. The sender connects (and imports grpc) when
``restore()`` returns or the first step is reported, at most START_GRACE seconds after it started,
so that its ~90 ms of CPU does not delay the restore.

Stopping together (ranks without a shared process group): a rank that holds for a stop signal
claims the step it holds at (:func:`report_stopping`); clusterd answers every rank of the run that
a stop is under way and, once all of them hold, the step they all stop at (:func:`stop_news`,
:func:`wait_stop`). While a rank holds, it beats twice per interval. An answer to a claim that says
nothing of a stop (a clusterd that does not take claims, a run it does not follow any more) ends
the wait at once: the rank then stops where it holds.

Started and ended by the job's runtime (:mod:`clusterctl.runtime`: ``clusterctl.job_runtime()`` or
``with CheckpointManager(...)``), which sends the exit status of the block it leaves as the last
beat (:func:`finish`). Nothing here patches ``sys.exit``, ``sys.excepthook`` or ``atexit``: a
process that ends outside a runtime block, by ``os._exit`` or by a fatal signal sends no exit
status, which the service sees as silence (Slurm's own exit status stays authoritative).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .digits import parse_digits
from .ranks import rank_and_world_size

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 1.0
MIN_INTERVAL, MAX_INTERVAL = 0.05, 600.0
MAX_DEADLINE = 2.0  # per beat; never more than the interval
FINAL_DEADLINE = 1.0  # the exiting beat delays the process exit by at most this (plus a pending connect)
STEP_AVERAGING = 0.1  # weight of the newest step in the step time sent (about the last 20 steps)
MAX_STACK = 8192  # characters of stacks a beat carries (clusterd keeps as many, refuses over 16 KiB)
STACK_FRAMES = 32  # innermost frames of each thread a beat carries
START_GRACE = 1.0  # seconds the sender waits for restore()/the first step before importing grpc (see below)
_INT32 = (1 << 31) - 1


@dataclass(frozen=True)
class StopNews:
    """What clusterd said about a stop of this rank's run."""

    under_way: bool = False  # a rank of the run holds for a stop: hold at the next step and claim it
    step: int | None = None  # every rank held: the step each trains on to, saves, and stops at
    refused: bool = False  # clusterd answered this rank's claim without taking it: no step will come


@dataclass(frozen=True)
class HeartbeatConfig:
    """Where and as whom a rank sends its beats (read from the job's environment)."""

    addr: str
    token: str
    record_id: int = 0
    job_id: str = ""
    restart_count: int = 0
    relaunch: int = 0  # CLUSTERCTL_RELAUNCH: the in-place relaunch of the run (--spare-nodes)
    rank: int = 0
    world_size: int = 1
    node: str = ""
    interval: float = DEFAULT_INTERVAL

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HeartbeatConfig | None:
        """The configuration in ``env`` (default os.environ), or None when heartbeats are off."""
        env = os.environ if env is None else env
        if _opted_out(env):
            return None
        addr = env.get("CLUSTERCTL_HEARTBEAT_ADDR", "").strip()
        token = env.get("CLUSTERCTL_HEARTBEAT_TOKEN", "").strip()
        if not addr or not token:
            return None
        rank, world = rank_and_world_size(env)
        return cls(
            addr=addr,
            token=token,
            record_id=_number(env, "CLUSTERCTL_RECORD_ID"),
            job_id=env.get("SLURM_JOB_ID", ""),
            restart_count=_number(env, "SLURM_RESTART_COUNT"),
            relaunch=_number(env, "CLUSTERCTL_RELAUNCH"),
            rank=rank,
            world_size=world,
            node=env.get("SLURMD_NODENAME", ""),
            interval=_seconds(env.get("CLUSTERCTL_HEARTBEAT_INTERVAL", "")),
        )


def _number(env: Mapping[str, str], name: str) -> int:
    return parse_digits(env.get(name, "").strip()) or 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_INTERVAL
    return min(MAX_INTERVAL, max(MIN_INTERVAL, value)) if math.isfinite(value) and value > 0 else DEFAULT_INTERVAL


class HeartbeatSender:
    """One rank's beats: a daemon thread sends the current state every interval (see the module doc)."""

    def __init__(self, config: HeartbeatConfig, *, start_grace: float = START_GRACE) -> None:
        self.config = config
        self.start_grace = start_grace
        self.pid = os.getpid()
        self.interval = config.interval
        self.sent = 0  # beats the service answered
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._go = threading.Event()  # restore() returned or a step was reported: connect now
        self._ready = threading.Event()  # the channel exists (or could not be made)
        self._stop = threading.Event()
        self._news = threading.Condition(self._lock)  # notified when the stop news changes
        self._stopping_step: int | None = None  # the step this rank holds at for a stop
        self._stop_news = StopNews()
        self._step = self._committed = -1
        self._step_at = 0.0  # time.monotonic() of the newest step reported
        self._step_seconds = 0.0  # seconds per step, averaged over the recent steps (0: not known yet)
        self._stack = ""  # this process's stacks, asked for by clusterd: sent in the next beat
        self._stall, self._saves = 0.0, 0  # seconds save() blocked training in this process, and how often
        self.checkpoint_interval: float | None = None  # the interval clusterd advised last (None: none)
        self._restored = self._closed = self._warned = self._rotated = False
        self._urgent = True  # the first step reported (in this process, then after restore) goes out at once
        self._call: Callable[..., Any] | None = None  # Heartbeat at the current address (None: heartbeats off)
        self._request: Callable[..., Any] = dict
        self._addrs: tuple[str, ...] = ()
        self._index = 0  # the address beats go to; moves on after an UNAVAILABLE/DEADLINE_EXCEEDED answer
        self._channels: dict[int, Any] = {}
        self._calls: dict[int, Callable[..., Any]] = {}
        self._thread = threading.Thread(target=self._run, name="clusterctl-heartbeat", daemon=True)

    def start(self) -> HeartbeatSender:
        self._thread.start()
        return self

    # --- reports from the training process (cheap; never block) ---------------------------
    def report_step(self, step: int) -> None:
        now = time.monotonic()
        with self._lock:
            step = int(step)
            if step > self._step >= 0 and self._step_at:
                pace = (now - self._step_at) / (step - self._step)
                old = self._step_seconds
                self._step_seconds = pace if old <= 0 else old + STEP_AVERAGING * (pace - old)
            if step > self._step:
                self._step, self._step_at = step, now
            urgent, self._urgent = self._urgent, False
        if urgent:
            self._go.set()
            self._wake.set()

    def report_committed(self, step: int) -> None:
        """Sent at once (commits are rare): a failure right after a commit must not leave clusterd
        deciding on the step before it."""
        with self._lock:
            newer = int(step) > self._committed
            self._committed = max(self._committed, int(step))
        if newer:
            self._wake.set()

    def report_save_stall(self, seconds: float) -> None:
        """One save blocked training for ``seconds``: the autopilot's measure of what a save costs."""
        if not math.isfinite(seconds) or seconds < 0:
            return
        with self._lock:
            self._stall += seconds
            self._saves += 1

    def report_restored(self) -> None:
        with self._lock:
            self._restored = self._urgent = True
        self._go.set()
        self._wake.set()

    def report_stopping(self, step: int) -> None:
        """This rank holds at ``step`` for a stop: sent at once, and every half interval until answered."""
        with self._lock:
            self._stopping_step = max(int(step), self._stopping_step if self._stopping_step is not None else -1)
        self._go.set()
        self._wake.set()

    def stop_news(self) -> StopNews:
        with self._lock:
            return self._stop_news

    def wait_stop(self, timeout: float) -> StopNews:
        """The news once clusterd named the step (or refused the claim, or is restarting the run), else as
        it stands after ``timeout`` s."""
        end = time.monotonic() + timeout
        with self._news:
            while self._stop_news.step is None and not self._stop_news.refused and not self._closed:
                if self._stop.is_set():
                    break  # the run is being restarted (a peer failed): it will not stop together
                if self._ready.is_set() and self._call is None:
                    break  # heartbeats could not start: no answer will come
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._news.wait(min(left, 0.5))
            return self._stop_news

    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def beat_now(self) -> None:
        self._go.set()
        self._wake.set()

    # --- the sender thread -----------------------------------------------------------------
    def _connect(self) -> None:
        try:
            from .failover import split_addrs
            from .v1 import jobs_pb2

            self._addrs = split_addrs(self.config.addr)
            self._request = jobs_pb2.HeartbeatRequest
            self._call = self._open(0)
        except Exception as exc:
            log.info("clusterctl heartbeats are off: cannot open a channel to %s: %s", self.config.addr, exc)
        finally:
            self._ready.set()

    def _open(self, index: int) -> Callable[..., Any]:
        """The Heartbeat call of address ``index`` (its channel is made on first use)."""
        call = self._calls.get(index)
        if call is None:
            from .client import open_channel
            from .v1 import jobs_pb2_grpc

            backoff = max(100, int(min(self.interval, MAX_DEADLINE) * 1000))
            channel = open_channel(
                self._addrs[index],
                options=[
                    ("grpc.initial_reconnect_backoff_ms", backoff),
                    ("grpc.min_reconnect_backoff_ms", backoff),
                    ("grpc.max_reconnect_backoff_ms", max(backoff, 2000)),
                    ("grpc.enable_retries", 0),
                ],
            )
            self._channels[index] = channel
            call = self._calls[index] = jobs_pb2_grpc.JobServiceStub(channel).Heartbeat
        return call

    def _rotate(self) -> bool:
        """Send the next beats to the next address (the leader may be there); False with one address."""
        if len(self._addrs) < 2:
            return False
        index = (self._index + 1) % len(self._addrs)
        try:
            call = self._open(index)
        except Exception as exc:  # the same options opened the first channel: not expected
            log.debug("heartbeat: cannot open a channel to %s: %s", self._addrs[index], exc)
            return False
        self._index, self._call = index, call
        log.debug("clusterctl heartbeats go to %s now", self._addrs[index])
        return True

    def _run(self) -> None:
        # grpc's import and the channel cost ~90 ms of CPU under the GIL: taken while the rank is still
        # importing and restoring, they would delay its first step by as much. So the sender connects
        # once restore() returned or a step was reported, or after start_grace seconds at the latest
        # (liveness during a long restore), then sends at once what it has.
        self._go.wait(self.start_grace)
        self._connect()
        if self._call is None:
            return
        while True:
            with self._lock:
                if self._closed:
                    return
            started = time.monotonic()
            self._beat()
            with self._lock:
                holding = self._stopping_step is not None and self._stop_news.step is None
            period = self.interval / 2 if holding else self.interval
            self._wake.wait(max(0.0, started + period - time.monotonic()))
            self._wake.clear()

    def _beat(self, *, exit_code: int | None = None, deadline: float | None = None) -> bool:
        """Send the current state once; False when the service did not answer (logged once)."""
        self._rotated = False
        call = self._call
        if call is None:
            return False
        c = self.config
        with self._lock:
            fields: dict[str, Any] = {
                "step": self._step,
                "committed_step": self._committed,
                "restored": self._restored,
                "step_seconds": self._step_seconds,
            }
            if self._stack:
                fields["stack"], self._stack = self._stack, ""
            fields.update(save_stall_seconds=self._stall, saves=min(self._saves, 2**32 - 1))
            claim = self._stopping_step
        if claim is not None:
            fields["stopping_step"] = claim
        if exit_code is not None:
            fields.update(exiting=True, exit_code=max(-_INT32 - 1, min(_INT32, exit_code)))
        timeout = deadline if deadline is not None else min(self.interval, MAX_DEADLINE)
        try:  # building the request is inside: a field out of protobuf's range (a huge SLURM_PROCID) is dropped too
            request = self._request(
                record_id=c.record_id,
                token=c.token,
                job_id=c.job_id,
                restart_count=c.restart_count,
                relaunch=c.relaunch,
                rank=c.rank,
                world_size=c.world_size,
                node=c.node,
                pid=os.getpid(),
                **fields,
            )
            reply = call(request, timeout=max(MIN_INTERVAL, timeout))
        except Exception as exc:  # grpc.RpcError (UNAVAILABLE, UNIMPLEMENTED, DEADLINE_EXCEEDED, ...) or worse
            code = exc.code().name if hasattr(exc, "code") and callable(exc.code) else repr(exc)
            if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                self._rotated = self._rotate()  # a follower ("follower; ...") or a dead replica: try the next
            elif claim is not None and code in ("UNAUTHENTICATED", "PERMISSION_DENIED", "INVALID_ARGUMENT"):
                self._refuse_claim()  # the record ended (a cancel) or the claim is not believed: no step will come
            if not self._warned:
                self._warned = True
                log.info(
                    "clusterctl heartbeats to %s are not getting through (%s); training goes on, beats are dropped",
                    self.config.addr,
                    code,
                )
            return False
        self.sent += 1
        wanted = reply.interval.seconds + reply.interval.nanos / 1e9
        if wanted > 0:
            self.interval = min(MAX_INTERVAL, max(MIN_INTERVAL, wanted))
        if reply.want_stack:
            with self._lock:
                self._stack = stacks()
            self._wake.set()
        if reply.HasField("checkpoint_interval"):
            advised = reply.checkpoint_interval.seconds + reply.checkpoint_interval.nanos / 1e9
            self.checkpoint_interval = advised if advised > 0 else None
        if reply.stop:
            self._stop.set()
            with self._news:
                self._news.notify_all()  # a rank holding for a stop step waits no more: none will come
        self._hear_stop(reply, claimed=claim is not None)
        return True

    def _hear_stop(self, reply: Any, *, claimed: bool) -> None:
        step = reply.stop_step if reply.HasField("stop_step") else None
        if reply.stopping or step is not None:
            with self._news:
                if self._stop_news.step is None:  # a decision stands
                    self._stop_news = StopNews(True, step)
                    self._news.notify_all()
        elif claimed:
            self._refuse_claim()

    def _refuse_claim(self) -> None:
        with self._news:
            if self._stop_news.step is None:
                self._stop_news = StopNews(self._stop_news.under_way, None, refused=True)
                self._news.notify_all()

    def finish(self, exit_code: int) -> None:
        """Send the one exiting beat with ``exit_code`` and stop the thread (at most ~FINAL_DEADLINE s)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._news.notify_all()
        self._go.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(FINAL_DEADLINE)  # a regular beat in flight must not arrive after the last one
        if self._ready.is_set():
            # Each address at most once (the leader is one of them), within FINAL_DEADLINE in all.
            end = time.monotonic() + min(self.interval, FINAL_DEADLINE)
            for _ in self._addrs or ("",):
                left = end - time.monotonic()
                if left <= 0 or self._beat(exit_code=exit_code, deadline=left) or not self._rotated:
                    break
        for channel in self._channels.values():
            channel.close()


def stacks() -> str:
    """This process's Python stacks, main thread first, each thread's innermost STACK_FRAMES frames
    (innermost last), at most MAX_STACK characters (clusterd keeps as many): what a rank that stopped
    advancing is doing, as clusterd asked. Taken by the beat thread from inside the process, so it
    needs no privilege and runs as the job's user; a failure to take them never ends that thread."""
    try:
        return _stacks()
    except Exception as exc:  # whatever a frame's repr or a dying thread raises
        log.debug("cannot take the stacks: %s", exc)
        return f"(stacks unavailable: {type(exc).__name__})"


def _stacks() -> str:
    frames = sys._current_frames()
    main = threading.main_thread().ident
    names = {t.ident: t.name for t in threading.enumerate()}
    parts: list[str] = []
    used = 0
    for ident in sorted(frames, key=lambda i: (i != main, i)):
        if ident == threading.get_ident():
            continue  # the beat thread itself
        head = f"Thread {names.get(ident, ident)}:\n"
        text = "".join(traceback.format_stack(frames[ident], limit=STACK_FRAMES))  # the innermost ones
        room = MAX_STACK - used - (1 if parts else 0)
        if len(head) + len(text) > room:
            if parts:
                break  # the threads after it are left out
            text = text[len(head) + len(text) - room :]  # the first thread's innermost frames stay
        parts.append(head + text)
        used += len(parts[-1]) + (1 if len(parts) > 1 else 0)
    return "\n".join(parts)


# --- the process-wide sender --------------------------------------------------------------
_lock = threading.Lock()
_sender: HeartbeatSender | None = None
_checked = False  # the environment was looked at in this process (True in a forked child: it starts none)
_abandoned: list[HeartbeatSender] = []  # a parent's senders, kept alive in a forked child (never touched)


def start() -> HeartbeatSender | None:
    """Start this process's sender when the environment configures one (idempotent); never raises.

    Called by :func:`clusterctl.job_runtime` (and ``with CheckpointManager(...)``); the reports
    below go to the sender it started and are no-ops before.
    """
    global _sender, _checked
    if _checked:
        return _sender
    with _lock:
        if not _checked:
            try:
                _sender = _start_from_env()
            except Exception as exc:  # a bug here must not stop training
                log.info("clusterctl heartbeats are off: %s", exc)
            _checked = True
    return _sender


def _start_from_env() -> HeartbeatSender | None:
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.parent_process() is not None:
        return None  # a worker of the rank (spawned DataLoader worker, pool), not the rank
    config = HeartbeatConfig.from_env()
    if config is None:
        return None
    return HeartbeatSender(config).start()


def report_step(step: int) -> None:
    """This rank finished training step ``step``: the first one after start/restore is sent at once."""
    try:
        if (s := _sender) is not None:
            s.report_step(step)
    except Exception as exc:
        log.debug("heartbeat report_step: %s", exc)


def report_committed(step: int) -> None:
    """Checkpoint step ``step`` is committed (as this rank saw it)."""
    try:
        if (s := _sender) is not None:
            s.report_committed(step)
    except Exception as exc:
        log.debug("heartbeat report_committed: %s", exc)


def report_save_stall(seconds: float) -> None:
    """A save blocked training for ``seconds`` (sent with the next beat)."""
    try:
        if (s := _sender) is not None:
            s.report_save_stall(seconds)
    except Exception as exc:
        log.debug("heartbeat report_save_stall: %s", exc)


def checkpoint_interval() -> float | None:
    """The checkpoint interval (seconds) clusterd advised in its last reply; None without heartbeats
    or before any advice (clusterd advises once the run has saved)."""
    s = _sender
    return s.checkpoint_interval if s is not None else None


def report_restored() -> None:
    """``restore()`` returned in this run (with a state or with None); sent at once."""
    try:
        if (s := _sender) is not None:
            s.report_restored()
    except Exception as exc:
        log.debug("heartbeat report_restored: %s", exc)


def beat_now() -> None:
    """Send a beat now instead of at the end of the interval (the answer may carry ``stop``)."""
    try:
        if (s := _sender) is not None:
            s.beat_now()
    except Exception as exc:
        log.debug("heartbeat beat_now: %s", exc)


def report_stopping(step: int) -> None:
    """This rank holds at training step ``step`` for a stop (see the module doc); sent at once."""
    try:
        if (s := _sender) is not None:
            s.report_stopping(step)
    except Exception as exc:
        log.debug("heartbeat report_stopping: %s", exc)


def stop_news() -> StopNews | None:
    """What clusterd said so far about a stop of this run; None when this process sends no heartbeats."""
    s = _sender
    return s.stop_news() if s is not None else None


def wait_stop(timeout: float) -> StopNews | None:
    """Wait up to ``timeout`` s for clusterd to name the stop step (or refuse the claim); None without heartbeats."""
    s = _sender
    return s.wait_stop(timeout) if s is not None else None


def stop_requested() -> bool:
    """True once the service answered a beat with ``stop``: the job is being restarted, exit soon."""
    s = _sender
    return s is not None and s.stop_requested()


def finish(exit_code: int) -> None:
    """Send this process's exiting beat with ``exit_code`` and stop its sender (once; never raises)."""
    s = _sender
    if s is None or s.pid != os.getpid():
        return
    try:
        s.finish(exit_code)
    except Exception as exc:
        log.debug("heartbeat finish: %s", exc)


def _opted_out(env: Mapping[str, str]) -> bool:
    return env.get("CLUSTERCTL_HEARTBEAT", "").strip().lower() in ("0", "false", "no", "off")


def _after_fork_in_child() -> None:
    """A forked child keeps no sender and starts none: its grpc channel belongs to the parent (never used or closed)."""
    global _sender, _checked, _lock
    if _sender is not None:
        _abandoned.append(_sender)
    _sender, _checked = None, True
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = [
    "HeartbeatConfig",
    "HeartbeatSender",
    "StopNews",
    "beat_now",
    "checkpoint_interval",
    "finish",
    "report_committed",
    "report_restored",
    "report_save_stall",
    "report_step",
    "report_stopping",
    "start",
    "stop_news",
    "stop_requested",
    "wait_stop",
]
