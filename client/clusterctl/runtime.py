"""The in-job runtime: a rank's heartbeats run inside a block, and the block's exit is its exit status.

Why a block: clusterd's failure detector wants each rank's exit status as the rank's last beat
(a rank of a multi-rank job that fails is restarted at once instead of after its peers hang). The
status is read from the exception leaving the block, so nothing in the process is patched
(``sys.exit``, ``sys.excepthook``, ``atexit``) and what is reported is what the process exits with::

    import clusterctl

    if __name__ == "__main__":
        with clusterctl.job_runtime():
            sys.exit(main())

or ``@clusterctl.job_runtime()`` on a function that ends the process by returning (0) or raising.
``with CheckpointManager(...)`` enters the same runtime. The status is what Python exits with:
``SystemExit(n)`` is ``n`` masked to 8 bits as the OS does (None is 0, a message is 1),
KeyboardInterrupt is 130, any other exception 1, and leaving the explicit block normally is 0.

Blocks nest; the outermost one reports. A manager's block reports only an exception leaving it:
a script that goes on after ``with CheckpointManager(...)`` has not exited. Outside a clusterd job
(no heartbeat variables) entering and leaving cost a global lookup each.
"""

from __future__ import annotations

import threading
from contextlib import ContextDecorator
from types import TracebackType

from . import heartbeat

KEYBOARD_INTERRUPT_STATUS = 130  # 128 + SIGINT, as a shell reports it

_lock = threading.Lock()
_depth = 0  # runtime blocks open in this process


def exit_status(error: BaseException | None) -> int:
    """The exit status of a process that ``error`` ends (None: a normal end)."""
    if error is None:
        return 0
    if isinstance(error, SystemExit):
        code = error.code
        if code is None:
            return 0
        return code & 0xFF if isinstance(code, int) else 1  # a message is printed, the status is 1
    if isinstance(error, KeyboardInterrupt):
        return KEYBOARD_INTERRUPT_STATUS
    return 1


class JobRuntime(ContextDecorator):
    """A block (``with``) or a function (decorator) during which this rank beats; see the module doc.

    ``report_return=False`` (the checkpoint manager's block) reports only an exception leaving it.
    """

    def __init__(self, *, report_return: bool = True) -> None:
        self.report_return = report_return

    def enter(self) -> None:
        """Start the rank's heartbeats (when the job's environment configures them)."""
        global _depth
        with _lock:
            _depth += 1
        heartbeat.start()

    def leave(self, error: BaseException | None) -> None:
        """Leave the block that ``error`` (None: nothing) leaves; the outermost block reports the exit."""
        global _depth
        with _lock:
            _depth = max(0, _depth - 1)
            outermost = _depth == 0
        if outermost and (error is not None or self.report_return):
            heartbeat.finish(exit_status(error))

    def __enter__(self) -> JobRuntime:
        self.enter()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.leave(error)


def job_runtime() -> JobRuntime:
    """This rank's runtime: ``with clusterctl.job_runtime(): ...`` or ``@clusterctl.job_runtime()``."""
    return JobRuntime()


__all__ = ["JobRuntime", "exit_status", "job_runtime"]
