"""Object names of the checkpoint format (see FORMAT.md). Pure functions, no I/O.

::

    commits/<step:012d>.json                                        commit marker (rank 0, last)
    steps/<step:012d>/<attempt>/rank-<r:05d>-of-<w:05d>.safetensors  shard of rank r
    steps/<step:012d>/<attempt>/rank-<r:05d>-of-<w:05d>.manifest.json
    steps/<step:012d>/<attempt>/rank-<r:05d>-of-<w:05d>.writer.json    who writes rank r (create-only)
    steps/<step:012d>/<attempt>/rank-<r:05d>-of-<w:05d>.conflict.json  a second writer of rank r

``attempt`` names one save attempt of a step (the run id, plus ``-<n>`` when the same process
saves the same step again); it keeps a retried save from ever overwriting or being confused with
the objects of an earlier, failed attempt.
"""

from __future__ import annotations

import re

COMMITS = "commits/"
STEPS = "steps/"
MAX_STEP = 10**12 - 1

_COMMIT_RE = re.compile(r"^commits/([0-9]{12})\.json\Z")
_STEP_RE = re.compile(r"^steps/([0-9]{12})/([A-Za-z0-9._-]{1,80})/([^/]+)\Z")
_ATTEMPT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}\Z")


def check_step(step: object) -> int:
    """Return ``step`` if it is an int in [0, 10**12), else raise ValueError."""
    if isinstance(step, bool) or not isinstance(step, int):
        raise ValueError(f"step must be an int, got {type(step).__name__}")
    if not 0 <= step <= MAX_STEP:
        raise ValueError(f"step must be in [0, {MAX_STEP}], got {step}")
    return step


def check_attempt(attempt: str) -> str:
    if not _ATTEMPT_RE.match(attempt) or attempt in (".", ".."):
        raise ValueError(f"attempt/run id {attempt!r} must match [A-Za-z0-9][A-Za-z0-9._-]{{0,79}}")
    return attempt


def commit_key(step: int) -> str:
    return f"{COMMITS}{step:012d}.json"


def parse_commit_key(key: str) -> int | None:
    m = _COMMIT_RE.match(key)
    return int(m.group(1)) if m else None


def step_prefix(step: int) -> str:
    return f"{STEPS}{step:012d}/"


def attempt_prefix(step: int, attempt: str) -> str:
    return f"{step_prefix(step)}{attempt}/"


def shard_key(step: int, attempt: str, rank: int, world_size: int) -> str:
    return f"{attempt_prefix(step, attempt)}rank-{rank:05d}-of-{world_size:05d}.safetensors"


def manifest_key(step: int, attempt: str, rank: int, world_size: int) -> str:
    return f"{attempt_prefix(step, attempt)}rank-{rank:05d}-of-{world_size:05d}.manifest.json"


def writer_key(step: int, attempt: str, rank: int, world_size: int) -> str:
    return f"{attempt_prefix(step, attempt)}rank-{rank:05d}-of-{world_size:05d}.writer.json"


def conflict_key(step: int, attempt: str, rank: int, world_size: int) -> str:
    return f"{attempt_prefix(step, attempt)}rank-{rank:05d}-of-{world_size:05d}.conflict.json"


def is_conflict_key(key: str) -> bool:
    return key.endswith(".conflict.json")


def parse_step_key(key: str) -> tuple[int, str] | None:
    """``(step, attempt)`` of an object under ``steps/``, or None if the key is not of that shape."""
    m = _STEP_RE.match(key)
    return (int(m.group(1)), m.group(2)) if m else None
