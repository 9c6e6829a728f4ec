"""Which file a job's stdout or stderr went to: Slurm's filename patterns filled for one job or task.

The record keeps the output paths absolute with Slurm's patterns left in (``/home/a/%x-%j.out``);
sbatch's man page lists them: ``%%``, ``%A`` (array id), ``%a`` (task id), ``%b`` (task id mod 10),
``%j`` (job id: an array task's own), ``%N`` (first node), ``%n`` ``%t`` (node and task 0: the
batch script), ``%u`` (user), ``%x`` (job name), and a number between ``%`` and the letter pads
numbers with zeros. ``%J`` and ``%s`` (step ids) name nothing definite for the batch script, so a
path using them is refused rather than guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterd.errors import FailedPrecondition

_PATTERN = re.compile(r"%(\d*)([A-Za-z%])")
_NUMERIC = frozenset("Aabjnt")


@dataclass(frozen=True)
class OutputJob:
    """What the patterns can refer to, for one job or one array task."""

    job_id: str  # the Slurm job id of this job or task (%j), "" when unknown
    array_id: str = ""  # %A (the job id itself for a plain job)
    task_id: int | None = None  # %a
    name: str = ""
    user: str = ""
    first_node: str = ""  # %N, "" before the job started


def expand(pattern: str, job: OutputJob, *, field: str) -> str:
    """``pattern`` with every Slurm %-pattern filled. Raises FailedPrecondition naming ``field``
    when a pattern has no value yet (a pending job's node) or none definite (``%J``)."""

    def fill(m: re.Match[str]) -> str:
        pad, letter = m.group(1), m.group(2)
        values: dict[str, str | int | None] = {
            "%": "%", "A": job.array_id or job.job_id, "a": job.task_id, "j": job.job_id or None,
            "b": None if job.task_id is None else job.task_id % 10, "N": job.first_node or None, "n": 0, "t": 0,
            "u": job.user, "x": job.name,
        }  # fmt: skip
        if letter not in values:
            raise FailedPrecondition(f"{field} {pattern!r}: %{letter} names no single file of the batch script")
        value = values[letter]
        if value is None or value == "":
            why = {"N": "the job has not started on a node yet", "a": "name one array task (JOB_TASK)",
                   "b": "name one array task (JOB_TASK)"}.get(letter, "its value is not known")  # fmt: skip
            raise FailedPrecondition(f"{field} {pattern!r}: cannot fill %{letter}: {why}")
        if letter == "%":
            return "%"
        text = str(value)
        return text.zfill(int(pad)) if pad and letter in _NUMERIC else text

    return _PATTERN.sub(fill, pattern)
