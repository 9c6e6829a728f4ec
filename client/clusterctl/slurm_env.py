"""What a training process learns from Slurm: its rank, the world size, a run id, and preemption.

Rank and world size come from an initialised ``torch.distributed``, then torchrun's
``RANK``/``WORLD_SIZE``, then ``SLURM_PROCID``/``SLURM_NTASKS`` (set by ``srun`` for every task,
and shared by the processes torchrun starts inside one task), else ``0``/``1``.

Preemption: Slurm sends a signal before the time limit when the job was submitted with
``--signal=B:USR1@<seconds>`` (clusterd does this; ``B:`` sends it to the batch shell, which
forwards it to the tasks; without ``B:`` it goes to every task), and SIGTERM on preemption or
``scancel``. :class:`RequeueOnSignal` turns either into a flag the training loop polls (with
:meth:`RequeueOnSignal.requested_at`, every rank stops at the same step), and
:meth:`RequeueOnSignal.checkpoint_and_exit` finishes the in-flight checkpoint (or takes one),
then exits with :data:`REQUEUE_EXIT_CODE`.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import Any, NoReturn

from clusterctl import heartbeat
from clusterctl.ranks import rank_and_world_size as rank_and_world_size  # re-exported: its public home

REQUEUE_EXIT_CODE = 85
"""Exit status that means "requeue me": the job stopped on purpose (time limit approaching,
preemption) after a committed checkpoint and wants to continue from it. clusterd's restart
policy treats it as retryable without counting it as a failure; 85 is outside the ranges used by
shells (126-165 = signals/exec errors), Slurm and Python (1, 2)."""

HOLD_TIMEOUT = 20.0
"""Seconds a rank holds at its step for clusterd to name the stop step (requested_at): well within
Slurm's default KillWait (30 s) after SIGTERM, leaving time to train on and save."""


def slurm_run_id(env: Mapping[str, str] | None = None) -> str | None:
    """An id shared by every task of one incarnation of a Slurm job step, or None outside Slurm.

    ``<job>.<step>-r<restart count>``: a requeued job keeps its job id but gets a new restart count.
    """
    env = os.environ if env is None else env
    job = env.get("SLURM_ARRAY_JOB_ID") and f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID', '')}"
    job = job or env.get("SLURM_JOB_ID")
    if not job:
        return None
    raw = f"slurm-{job}.{env.get('SLURM_STEP_ID', 'x')}-r{env.get('SLURM_RESTART_COUNT', '0')}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", raw)[:80]


class RequeueOnSignal:
    """Turn SIGUSR1/SIGTERM into a flag; checkpoint and exit with REQUEUE_EXIT_CODE when it is set.

    Use from the main thread (Python runs signal handlers there)::

        with RequeueOnSignal() as stop:
            for step in range(start, total):
                train_step()
                if step % 1000 == 0:
                    ckpt.save(step, state)
                if stop.requested:
                    stop.checkpoint_and_exit(ckpt, step, state)

    The handler itself only sets the flag (safe at any point); the expensive work happens at the
    next poll, between training steps, where the state is consistent.

    With an initialized torch.distributed process group at ``install()`` (``agree=None``, the
    default, or ``agree=True``), ranks agree: reading ``requested`` is then a collective that is
    True on every rank once any rank got the signal, so every rank checkpoints the same step. Read
    it exactly once per step on every rank, as above.

    Without a process group, ranks agree through clusterd's heartbeats (sent while the rank runs
    in the job's runtime: ``clusterctl.job_runtime()`` or ``with CheckpointManager(...)``): ask
    :meth:`requested_at` with the step just finished instead of reading ``requested``::

        if stop.requested_at(step):
            stop.checkpoint_and_exit(ckpt, step, state)

    A rank that got the signal, or heard from clusterd that another rank did, holds at that step
    until clusterd names the step every rank stops at (the highest step held), then trains on to
    it. When no answer comes within ``hold_timeout`` seconds (no heartbeats, a clusterd that does
    not take the claim, a peer that never holds), the rank stops at the step it holds at.
    """

    def __init__(
        self,
        signals: Iterable[int] = (signal.SIGUSR1, signal.SIGTERM),
        *,
        exit_code: int = REQUEUE_EXIT_CODE,
        agree: bool | None = None,
        hold_timeout: float = HOLD_TIMEOUT,
    ) -> None:
        self.signals = tuple(signals)
        self.exit_code = exit_code
        self.hold_timeout = hold_timeout
        self.held_step: int | None = None  # the step this rank held at for a stop (requested_at)
        self.stop_step: int | None = None  # the step this rank stops at, once known (requested_at)
        self._event = threading.Event()
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._agree = agree
        self._agreement: Any = None

    @property
    def requested(self) -> bool:
        """True once one of the signals arrived (on any rank, when ranks agree)."""
        if self._agreement is not None:
            return bool(self._agreement.any(self._event.is_set()))
        return self._event.is_set()

    def requested_at(self, step: int) -> bool:
        """Whether to checkpoint and stop after ``step``, the training step just finished.

        With a process group this is ``requested`` (a collective: ask once per step on every rank).
        Without one, a stop signal here or on another rank (as clusterd tells) holds this rank at
        ``step`` until clusterd names the step all ranks stop at, at most ``hold_timeout`` seconds;
        then it is True at that step. Without heartbeats, or when no step is named in time, it is
        True at the step the rank holds at (the save then commits only if every rank chose it).
        """
        if self._agreement is not None:
            return self.requested
        if self.stop_step is not None:
            return step >= self.stop_step
        news = heartbeat.stop_news()
        if not self._event.is_set() and (news is None or not news.under_way):
            return False
        self.held_step = self.stop_step = step  # unless clusterd names another step
        if news is None:
            return True  # no heartbeats: no one to agree through
        heartbeat.report_stopping(step)
        news = heartbeat.wait_stop(self.hold_timeout)
        if news is not None and news.step is not None:
            self.stop_step = news.step
            if news.step < step:  # this rank is past it already: its save cannot match the others'
                print(
                    f"clusterctl: the ranks agreed on step {news.step}, but this rank holds at step {step}; "
                    "stopping here, and this step's save will not commit",
                    file=sys.stderr,
                    flush=True,
                )
        else:
            why = (
                "the run is being restarted"
                if heartbeat.stop_requested()
                else "clusterd did not take the claim"
                if news is not None and news.refused
                else "no answer in time"
            )
            print(
                f"clusterctl: stopping at step {step} without the other ranks' agreement ({why})",
                file=sys.stderr,
                flush=True,
            )
        return step >= self.stop_step

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        self._event.set()

    def install(self) -> RequeueOnSignal:
        """Install the handlers (and, with a process group, the ranks' agreement: collective).

        Raises:
            RuntimeError: ``agree=True`` without an initialized multi-rank process group.
        """
        if self._agree is not False:
            from clusterctl.checkpoint.coordination import StopAgreement

            self._agreement = StopAgreement.create()
            if self._agree and self._agreement is None:
                raise RuntimeError(
                    "RequeueOnSignal(agree=True) needs an initialized torch.distributed process "
                    "group of 2 or more ranks; call init_process_group() first"
                )
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._agreement is not None:
            self._agreement.close()
            self._agreement = None

    def __enter__(self) -> RequeueOnSignal:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def checkpoint_and_exit(
        self, ckpt: Any, step: int | None = None, state: Any = None, *, timeout: float | None = None
    ) -> NoReturn:
        """Finish in-flight saves, save ``state`` at ``step`` if given, wait for the commit, exit.

        Exits with :data:`REQUEUE_EXIT_CODE` when everything committed. If the checkpoint fails
        the error propagates (the process exits non-zero with a traceback, and the job is not
        marked as a clean requeue: its last committed step is older than it believes).
        """
        if self._agreement is not None and step is not None:
            low, high = self._agreement.bounds(step)
            if low != high:
                raise RuntimeError(
                    f"ranks stopped at different steps ({low} to {high}): read `requested` once per "
                    "step on every rank, so that all of them checkpoint the same step"
                )

        def finish() -> None:
            ckpt.wait()
            if step is not None and ckpt.latest_step() != step:
                ckpt.save(step, state).result(timeout=timeout)
            ckpt.close()

        errors: list[BaseException] = []
        worker = threading.Thread(target=_capture(finish, errors), name="clusterctl-final-save", daemon=True)
        worker.start()
        # While the final save waits on its peers, ask clusterd whether this run is being restarted
        # already (a peer crashed, hung or lost its node): then no commit can come, and waiting out
        # Slurm's KillWait only delays the next run. Leave at once, without running exit hooks that
        # would join the stuck save's threads.
        while worker.is_alive():
            heartbeat.beat_now()
            worker.join(_STOP_POLL_SECONDS)
            if worker.is_alive() and heartbeat.stop_requested():
                print(
                    "clusterctl: the run is being restarted (a peer failed): leaving without the final save",
                    file=sys.stderr,
                    flush=True,
                )
                sys.stdout.flush()
                os._exit(self.exit_code)
        if errors:
            raise errors[0]
        self.exit()

    def exit(self) -> NoReturn:
        """Exit with the requeue code (flushing stdio first).

        The SystemExit leaving the job's runtime block (``clusterctl.job_runtime()`` or
        ``with CheckpointManager(...)``) tells clusterd "exited 85".
        """
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(self.exit_code)


_STOP_POLL_SECONDS = 0.25  # how often a final save waiting on its peers asks whether to give up


def _capture(fn: Callable[[], None], errors: list[BaseException]) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # re-raised in the signalled thread
            errors.append(exc)

    return run
