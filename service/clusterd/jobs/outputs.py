"""Which file a job's stdout or stderr went to: Slurm's filename patterns filled for one job or task.

The record keeps the output paths absolute with Slurm's patterns left in (``/home/a/%x-%j.out``);
sbatch's man page lists them: ``%%``, ``%A`` (array id), ``%a`` (task id), ``%b`` (task id mod 10),
``%j`` (job id: an array task's own), ``%N`` (first node), ``%n`` ``%t`` (node and task 0: the
batch script), ``%u`` (user), ``%x`` (job name), and a number between ``%`` and the letter pads
numbers with zeros. ``%J`` and ``%s`` (step ids) name nothing definite for the batch script, so a
path using them is refused rather than guessed.

The padding is the job's user's to choose, so it is clamped to 10 digits exactly as slurmstepd
clamps it (``-o out-%200000000n.log`` is written to ``out-0000000000.log``): filling a pattern
costs at most a few times its own length, never what a width asks for. A result longer than the
kernel's ``PATH_MAX`` names no file anyone can open and is refused as soon as it gets that long.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterd.errors import FailedPrecondition

_PATTERN = re.compile(r"%(\d*)([A-Za-z%])")
_NUMERIC = frozenset("Aabjnt")
MAX_WIDTH = 10  # slurmstepd's fname.c: a wider zero-padding is this wide
MAX_EXPANDED = 4096  # PATH_MAX: open() refuses a longer path with ENAMETOOLONG


def width(digits: str) -> int:
    """The zero-padding Slurm applies for the digits between ``%`` and the letter (strtoul, then the
    clamp), without turning thousands of digits into an integer."""
    significant = digits.lstrip("0")
    return MAX_WIDTH if len(significant) > 2 else min(int(significant or "0"), MAX_WIDTH)


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
    """``pattern`` with every Slurm %-pattern filled, widths clamped as Slurm clamps them.

    Pure and bounded (at most ``MAX_EXPANDED`` characters are built), but callers on the event loop
    still run it in a worker thread: a record's pattern is as long as validation lets it be.
    Raises FailedPrecondition naming ``field`` when a pattern has no value yet (a pending job's node)
    or none definite (``%J``), or when the result is longer than ``MAX_EXPANDED``.
    """
    built = [0, 0]  # characters produced so far, end of the previous pattern in ``pattern``

    def fill(m: re.Match[str]) -> str:
        pad, letter = m.group(1), m.group(2)
        values: dict[str, str | int | None] = {
            "%": "%",
            "A": job.array_id or job.job_id,
            "a": job.task_id,
            "j": job.job_id or None,
            "b": None if job.task_id is None else job.task_id % 10,
            "N": job.first_node or None,
            "n": 0,
            "t": 0,
            "u": job.user,
            "x": job.name,
        }
        if letter not in values:
            raise FailedPrecondition(f"{field} {pattern!r}: %{letter} names no single file of the batch script")
        value = values[letter]
        if value is None or value == "":
            why = {
                "N": "the job has not started on a node yet",
                "a": "name one array task (JOB_TASK)",
                "b": "name one array task (JOB_TASK)",
            }.get(letter, "its value is not known")
            raise FailedPrecondition(f"{field} {pattern!r}: cannot fill %{letter}: {why}")
        text = "%" if letter == "%" else str(value)
        if pad and letter in _NUMERIC:
            text = text.zfill(width(pad))
        built[0] += m.start() - built[1] + len(text)
        built[1] = m.end()
        if built[0] > MAX_EXPANDED:
            raise _too_long(pattern, field)
        return text

    path = _PATTERN.sub(fill, pattern)
    if len(path) > MAX_EXPANDED:
        raise _too_long(pattern, field)
    return path


def _too_long(pattern: str, field: str) -> FailedPrecondition:
    shown = pattern if len(pattern) <= 80 else pattern[:80] + "..."
    return FailedPrecondition(
        f"{field} {shown!r} fills to more than {MAX_EXPANDED} characters: no file can be opened by so long a path"
    )
