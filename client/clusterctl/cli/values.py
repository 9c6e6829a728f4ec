"""Pure parsers for the values people type on the command line: counts, memory, times, hostlists.

They raise ``ValueError`` with a message fit for the user; :func:`argtype` turns them into
argparse ``type=`` callables so a bad value becomes a one-line usage error (exit code 2) before
anything is sent. Only the shape and the range of the proto field are checked here (ASCII digits
only); the server stays the authority on limits.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from fractions import Fraction
from typing import TypeVar

from clusterctl.digits import is_digits
from clusterctl.hostlist import expand_hostlist

T = TypeVar("T")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_GPU_TYPE = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")
_ARRAY_ITEM = r"[0-9]+(?:-[0-9]+(?::[0-9]+)?)?"
_ARRAY = re.compile(rf"^{_ARRAY_ITEM}(?:,{_ARRAY_ITEM})*(?:%[0-9]+)?\Z")
_MEM = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)B?\Z", re.IGNORECASE)
_MEM_FACTOR_MB = {  # exact: a float would round 99999999999999999999T, or overflow
    "K": Fraction(1, 1024), "": Fraction(1), "M": Fraction(1), "G": Fraction(1024), "T": Fraction(1 << 20)}
# Slurm's own time syntax: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_SLURM_TIME = re.compile(r"^([0-9]+(?::[0-9]+){0,2}|[0-9]+-[0-9]+(?::[0-9]+){0,2})\Z")
# A friendlier form, converted to Slurm syntax: 1d12h, 90m, 2h30m, 45s.
_HUMAN_TIME = re.compile(r"^(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?\Z", re.IGNORECASE)
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
    """``4G`` -> 4096, ``512M`` -> 512, ``1024`` -> 1024 (plain numbers are MB, as in sbatch).

    Kilobytes round up to whole MB so a small request never becomes 0 (which Slurm reads as
    "all the memory of the node").
    """
    m = _MEM.match(text.strip())
    if not m:
        raise ValueError(f"bad memory size {text!r}: use a number with an optional K, M, G or T suffix")
    if len(m.group(1)) > _MAX_DIGITS:
        raise ValueError(f"memory size {text!r} is too large")
    mb = math.ceil(Fraction(m.group(1)) * _MEM_FACTOR_MB[m.group(2).upper()])
    if mb < 1:
        raise ValueError(f"memory must be positive, got {text!r}")
    if mb > UINT64_MAX:
        raise ValueError(f"memory size {text!r} is too large (at most {UINT64_MAX} MB)")
    return mb


def time_limit(text: str) -> str:
    """Slurm time syntax passes through unchanged; ``2h30m``/``1d``/``90m`` become Slurm syntax.

    ``UNLIMITED``/``INFINITE`` pass through too; the server decides whether they are allowed.
    """
    value = text.strip()
    if value.upper() in ("UNLIMITED", "INFINITE") or _SLURM_TIME.match(value):
        return value
    m = _HUMAN_TIME.match(value)
    if not value or not m or not any(m.groups()):
        raise ValueError(f"bad time limit {text!r}: use MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]], or e.g. 90m, 2h30m, 1d")
    if any(g and len(g) > _MAX_DIGITS for g in m.groups()):
        raise ValueError(f"time limit {text!r} is too long")
    days, hours, minutes, secs = (int(g) if g else 0 for g in m.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    if total > UINT32_MAX * 60:  # Slurm keeps time limits as uint32 minutes
        raise ValueError(f"time limit {text!r} is too long")
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{seconds:02d}" if days else f"{hours:02d}:{minutes:02d}:{seconds:02d}"


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
    """``gpu:4`` / ``gpu:a100:4`` / ``gpu`` (sbatch --gres) -> (TYPE or "", count); other GRES are refused."""
    parts = text.strip().split(":")
    if parts[0] != "gpu" or len(parts) > 3 or "," in text:
        raise ValueError(f"bad --gres {text!r}: only gpu[:TYPE][:COUNT] is supported")
    if len(parts) == 1:
        return "", 1
    if len(parts) == 2 and not is_digits(parts[1]):
        return _gpu_type(parts[1], text), 1
    return (_gpu_type(parts[1], text) if len(parts) == 3 else ""), positive_int(parts[-1])


def typed_gpus(text: str) -> tuple[str, int]:
    """``4`` or ``a100:4`` (sbatch --gpus / --gpus-per-node) -> (TYPE or "", count)."""
    kind, sep, count = text.strip().rpartition(":")
    if sep and ":" in kind:
        raise ValueError(f"bad GPU count {text!r}: use N or TYPE:N")
    return (_gpu_type(kind, text) if sep else ""), positive_int(count)


def _gpu_type(kind: str, text: str) -> str:
    if not _GPU_TYPE.match(kind):
        raise ValueError(f"bad GPU type in {text!r}")
    return kind


def node_range(text: str) -> tuple[int, int]:
    """``-N 4`` -> (4, 0); ``-N 2-4`` -> (2, 4): sbatch's MIN[-MAX] node count (0: no upper bound given)."""
    low, sep, high = text.strip().partition("-")
    minimum = positive_int(low)
    if not sep:
        return minimum, 0
    maximum = positive_int(high)
    if maximum < minimum:
        raise ValueError(f"bad node range {text!r}: MAX is below MIN")
    return minimum, maximum


def array_indexes(text: str) -> str:
    """sbatch --array: ``0-9``, ``1,3,5``, ``0-15:4``, with an optional ``%N`` task limit; unchanged."""
    value = text.strip()
    if not _ARRAY.match(value):
        raise ValueError(f"bad --array {text!r}: use e.g. 0-9, 1,3,5, 0-15:4, optionally with %N")
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
