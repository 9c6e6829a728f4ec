"""Between two partial looks at a big queue: the followed jobs' states, read through slurmrestd.

Past the REST backend's whole-reply limit a partial look is two filtered squeues, and squeue takes
every job from slurmctld to filter them (10,000 jobs: ~0.1 s of CPU in squeue and ~50 ms in
slurmctld a look). ``GET jobs/state?job_id=..`` (24.11 on) costs slurmctld one small RPC and
clusterd a few milliseconds: while it answers as it did at the last partial look, that look stands
(unless it lists a PENDING job: see ``Between.remember``), so the service's own jobs' states are
read every poll. Every ``RECHECK_SECONDS`` the queue's ids and states (``squeue --only-job-state``:
no job record packed, ~30 ms of squeue) say whether another user's job started, ended or arrived
since the look: if none did, it stands again. So other users' jobs reach placement within
``RECHECK_SECONDS``, the staleness the node list has too; what changes with no state change (a hold
or a time limit set outside clusterd on a running job, another user's running job resized) waits
for the next look, at latest after the queue cache's next whole read. Any change the service itself
makes to a job forgets the last look: a hold or a comment changes no state.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from clusterd.slurm.types import JobPoll, JobState

# Seconds between two reads of the queue's job states while a look stands.
RECHECK_SECONDS = 10.0
# Seconds without the state read after it failed on an endpoint that exists (a 500, an expired token).
RETRY_SECONDS = 300.0
# Followed jobs past this many are not read by id (the query would be a long URL): partial looks then.
MAX_IDS = 200

States = tuple[str, ...]


def state_query(focus: frozenset[str]) -> str | None:
    """The query asking for the focus's states (``job_id`` repeated: slurmrestd refuses a CSV list
    there despite its description); None when the focus is too big to ask by id or holds anything
    but Slurm's own ids (never sent; a look every poll then)."""
    if len(focus) > MAX_IDS or not all(i.isascii() and i.isdigit() for i in focus):
        return None
    return "&".join(f"job_id={i}" for i in sorted(focus))


def parse_states(data: Any) -> States:
    """The reply's entries in a comparable form: every field each entry has (id, array task, state)."""
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise ValueError("GET jobs/state: no jobs list in the reply")
    return tuple(sorted(json.dumps(entry, sort_keys=True) for entry in data["jobs"]))


@dataclass
class _Look:
    poll: JobPoll
    focus: frozenset[str]
    states: States
    queue: str | None  # every job's id and state (squeue --only-job-state) before the look; None: unread
    at: float


class Between:
    """The last partial look and the states read just before it."""

    def __init__(self) -> None:
        self._last: _Look | None = None
        self._changes = 0  # the service's own changes to jobs begun or ended so far

    def _matching(self, focus: frozenset[str], states: States | None) -> _Look | None:
        """The last partial look, when taken for ``focus`` with these states of its jobs."""
        last = self._last
        if last is None or states is None or (last.focus, last.states) != (focus, states):
            return None
        return last

    def standing(self, focus: frozenset[str], states: States | None) -> JobPoll | None:
        """The last partial look, when it still stands for ``focus`` with these states; else None."""
        last = self._matching(focus, states)
        if last is None or time.monotonic() - last.at >= RECHECK_SECONDS:
            return None
        return last.poll

    def renewed(self, focus: frozenset[str], states: States | None, queue: str | None) -> JobPoll | None:
        """The last look for another ``RECHECK_SECONDS`` when no job in the queue changed state since
        it was taken (``queue``: every job's id and state now): no job started, ended or moved."""
        last = self._matching(focus, states)
        if last is None or queue is None or last.queue != queue:
            return None
        last.at = time.monotonic()
        return last.poll

    def mark(self) -> int:
        """Taken before reading the states: a change of the service's own since then voids the look."""
        return self._changes

    def remember(
        self, poll: JobPoll, focus: frozenset[str], states: States | None, queue: str | None, mark: int
    ) -> None:
        """A partial look just taken, with the followed jobs' states and the queue's (None: unread)
        read before it (a change between a read and the look shows as a difference at the next
        read: one more look, never a missed change).

        A look listing a PENDING job (one followed: a partial look lists no other) never stands: its
        reason and begin time change with no state change (a requeued job reads BeginTime only at
        Slurm's next scheduling pass, and its release waits for that), so it is looked at each poll.
        """
        pending = any(j.state is JobState.PENDING for j in poll.jobs)
        if states is None or mark != self._changes or pending:
            self._last = None
            return
        self._last = _Look(replace(poll, standing=True), focus, states, queue, time.monotonic())

    def forget(self) -> None:
        """No look taken before now stands (a whole read replaced what it listed)."""
        self._changes += 1
        self._last = None

    @contextlib.contextmanager
    def changing(self) -> Iterator[None]:
        """Around a change of the service's own to a job (a hold, a comment: no state shows it): no
        look taken before its end stands."""
        self.forget()
        try:
            yield
        finally:
            self.forget()
