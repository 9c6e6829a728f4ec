"""Pure parsers for the values people type on the command line: counts, memory, times, hostlists.

They raise ``ValueError`` with a message fit for the user; :func:`argtype` turns them into
argparse ``type=`` callables so a bad value becomes a one-line usage error (exit code 2) before
anything is sent. Only the shape and the range of the proto field are checked here (ASCII digits
only); the server stays the authority on limits.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TypeVar

from clusterctl.digits import is_digits
from clusterctl.hostlist import expand_hostlist
from clusterctl.sbatch import values as sbatch_values

T = TypeVar("T")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_DURATION = re.compile(r"^([0-9]+)\s*([smhd]?)\Z", re.IGNORECASE)
_DURATION_FACTOR = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DECIMAL = re.compile(r"^-?([0-9]+)(?:\.[0-9]+)?\Z")
_MAX_DIGITS = 40  # more digits than any bound here: refused before int() does the work


def argtype(parse: Callable[[str], T]) -> Callable[[str], T]:
    """Wrap a ``ValueError``-raising parser so argparse reports its message verbatim."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


UINT32_MAX = 2**32 - 1  # counts, seconds and nice are uint32 fields in the protos
UINT64_MAX = 2**64 - 1  # memory sizes (MB) are uint64
INT64_MAX = 2**63 - 1  # checkpoint steps are int64


def positive_int(text: str) -> int:
    """A count that must be at least 1 (nodes, GPUs, tasks): 0 and negatives are typos."""
    return _int(text, 1, UINT32_MAX, "a positive integer")


def non_negative_int(text: str) -> int:
    """A count where 0 means something (max restarts 0 = never restart)."""
    return _int(text, 0, UINT32_MAX, "a non-negative integer")


def exit_code(text: str) -> int:
    """A process exit code, 0..255."""
    try:
        return _int(text, 0, 255, "an exit code")
    except ValueError:
        raise ValueError(f"exit codes are 0..255, got {text!r}") from None


def step_number(text: str) -> int:
    """A checkpoint step: a non-negative int64."""
    return _int(text, 0, INT64_MAX, "a non-negative integer")


def _int(text: str, low: int, high: int, what: str) -> int:
    """ASCII digits with an optional '-' (so '-1' gets the range message), within [low, high].

    ``int`` alone would take ``'١٢'`` and ``'1_000'``; a value past the proto field's range would
    only fail later, inside protobuf, as an internal error.
    """
    value = text.strip()
    digits = value.removeprefix("-")
    if not is_digits(digits):
        raise ValueError(f"not an integer: {text!r}")
    too_many = len(digits) > _MAX_DIGITS  # past every bound, and too long for int() to be cheap
    number = (low - 1 if value.startswith("-") else high + 1) if too_many else int(value, 10)
    if number < low:
        raise ValueError(f"must be {what}, got {text!r}")
    if number > high:
        raise ValueError(f"must be {what} up to {high}, got {text!r}")
    return number


def seconds(text: str) -> float:
    """A non-negative number of seconds, ``90`` or ``2.5`` (ASCII digits; no inf, nan or exponent)."""
    return _seconds(text, "a non-negative number of seconds", lambda v: v >= 0)


def positive_seconds(text: str) -> float:
    """Like :func:`seconds`, and above 0 (a timeout)."""
    return _seconds(text, "a positive number of seconds", lambda v: v > 0)


def _seconds(text: str, what: str, ok: Callable[[float], bool]) -> float:
    m = _DECIMAL.match(text.strip())
    if not m or len(m.group(1)) > _MAX_DIGITS:
        raise ValueError(f"must be {what}, got {text!r}")
    value = float(m.group(0))
    if not ok(value) or value > UINT32_MAX:
        raise ValueError(f"must be {what} up to {UINT32_MAX}, got {text!r}")
    return value


def memory_mb(text: str) -> int:
    """``4G`` -> 4096, ``512M`` -> 512, ``1024`` -> 1024: sbatch's memory syntax (the one parser
    clusterd reads ``#SBATCH --mem`` with), so ``1.5G`` is refused here as sbatch refuses it.

    Kilobytes round up to whole MB so a small request never becomes 0 (which Slurm reads as
    "all the memory of the node").
    """
    mb = sbatch_values.megabytes(text)
    if mb > UINT64_MAX:
        raise ValueError(f"memory size {text!r} is too large (at most {UINT64_MAX} MB)")
    return mb


def node_memory_mb(text: str) -> int:
    """``--mem``: :func:`memory_mb`, where 0 asks for all the memory of each node (as sbatch)."""
    mb = sbatch_values.node_memory(text)
    return mb if mb == 0 else memory_mb(text)


def time_limit(text: str) -> str:
    """sbatch's time syntax (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]], UNLIMITED), checked with the parser
    clusterd reads ``#SBATCH --time`` with, and sent as written."""
    value = text.strip()
    seconds = sbatch_values.time_limit(value)
    if seconds is not None and seconds > UINT32_MAX * 60:  # Slurm keeps time limits as uint32 minutes
        raise ValueError(f"time limit {text!r} is too long")
    return value


def duration_seconds(text: str) -> int:
    """``600``, ``600s``, ``10m``, ``2h``, ``1d`` -> seconds (for --max-wait, --backoff, --signal-before)."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"bad duration {text!r}: use seconds or a number with s, m, h or d")
    if len(m.group(1)) > _MAX_DIGITS or (value := int(m.group(1)) * _DURATION_FACTOR[m.group(2).lower()]) > UINT32_MAX:
        raise ValueError(f"duration {text!r} is too long (at most {UINT32_MAX} seconds)")
    return value


def env_assignment(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` -> (NAME, VALUE); the value may be empty or contain '='."""
    name, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"bad --env {text!r}: use NAME=VALUE")
    return env_name(name), value


def is_env_name(text: str) -> bool:
    """A POSIX environment variable name: ASCII letters, digits, underscore; not starting with a digit."""
    return _ENV_NAME.match(text) is not None


def env_name(text: str) -> str:
    """:func:`is_env_name`, as a parser: the name, or ValueError."""
    if not is_env_name(text):
        raise ValueError(f"bad environment variable name {text!r}")
    return text


def gres_gpus(text: str) -> tuple[str, int]:
    """``gpu:4`` / ``gpu:a100:4`` / ``gpu`` (sbatch --gres) -> (TYPE or "", count): the shared parser."""
    kind, count = sbatch_values.gres_gpus(text.strip())
    return kind, _in_uint32(count, text)


def typed_gpus(text: str) -> tuple[str, int]:
    """``4`` or ``a100:4`` (sbatch --gpus / --gpus-per-node) -> (TYPE or "", count): the shared parser."""
    kind, count = sbatch_values.gpus(text.strip())
    return kind, _in_uint32(count, text)


def _in_uint32(count: int, text: str) -> int:
    if count > UINT32_MAX:
        raise ValueError(f"must be a positive integer up to {UINT32_MAX}, got {text!r}")
    return count


def node_range(text: str) -> tuple[int, int]:
    """``-N 4`` -> (4, 0); ``-N 2-4`` -> (2, 4): sbatch's MIN[-MAX] node count (0: no upper bound given),
    read with the service's parser."""
    minimum, maximum = sbatch_values.node_range(text.strip())
    for n in (minimum, maximum or 0):
        if n > UINT32_MAX:
            raise ValueError(f"must be a positive integer up to {UINT32_MAX}, got {text!r}")
    return minimum, maximum or 0


def array_indexes(text: str) -> str:
    """sbatch --array: ``0-9``, ``1,3,5``, ``0-15:4``, with an optional ``%N`` task limit; checked with the
    service's parser (and its task limit), sent unchanged."""
    value = text.strip()
    try:
        sbatch_values.array_indices(value)
    except ValueError as exc:
        raise ValueError(f"bad --array {text!r}: {exc}") from None
    return value


def nonblank(text: str) -> str:
    """A free-form sbatch value (dependency, begin, mail type, ...): the server checks its syntax."""
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def hostlist(text: str) -> list[str]:
    """Expand a Slurm hostlist (``node[1-3,7],gpu[01-02]``) into names, in the order written."""
    names = expand_hostlist(text)
    if not names:
        raise ValueError(f"empty hostlist {text!r}")
    return names


def split_list(text: str) -> list[str]:
    """``a,b , c`` -> [a, b, c] for repeatable-and-comma-separated options like --state."""
    return [p.strip() for p in text.split(",") if p.strip()]
