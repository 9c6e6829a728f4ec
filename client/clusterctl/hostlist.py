"""Slurm hostlist expressions: ``node[1-3,7],gpu-a[01-02]`` <-> a list of names.

Shared by the CLI (``--exclude node[1-3]``) and the service (Slurm's output), so both read the
syntax the same way.

Slurm prints every node and switch set in this syntax (``scontrol show topology``, ``squeue``,
``sinfo``) and accepts it in ``--nodelist``/``--exclude``, so both directions must agree with
Slurm exactly: zero padding is part of a name (``gpu-a01`` is not ``gpu-a1``), a range takes the
width of its first bound, and several bracket groups in one name multiply out
(``r[1-2]n[1-2]`` is four names).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from itertools import product

from clusterctl.digits import is_digits


class HostlistError(ValueError):
    """A hostlist expression is malformed or expands to too many names."""


_MAX_EXPANDED = 1_000_000  # a typo like node[1-99999999] must fail, not eat the memory
_LAST_DIGITS = re.compile(r"^(.*?)([0-9]+)([^0-9]*)\Z")


def _split_top_level(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append(expr[start:])
    return parts


def _expand_range_list(body: str, expr: str) -> list[str]:
    """``1-3,07`` -> ``["1", "2", "3", "07"]``, each range padded to its first bound's width."""
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise HostlistError(f"empty range in hostlist {expr!r}")
        lo, sep, hi = item.partition("-")
        if not is_digits(lo) or (sep and not is_digits(hi)):
            raise HostlistError(f"bad range {item!r} in hostlist {expr!r}")
        if not sep:
            out.append(lo)
            continue
        start, end = int(lo), int(hi)
        if end < start:
            raise HostlistError(f"descending range {item!r} in hostlist {expr!r}")
        if end - start + 1 > _MAX_EXPANDED:
            raise HostlistError(f"range {item!r} in hostlist {expr!r} is too large")
        width = len(lo)
        out.extend(str(n).zfill(width) for n in range(start, end + 1))
    return out


def _expand_one(name: str, expr: str) -> list[str]:
    """One comma-free element, possibly with several bracket groups."""
    pieces: list[list[str]] = []
    pos = 0
    while True:
        open_at = name.find("[", pos)
        if open_at < 0:
            pieces.append([name[pos:]])
            break
        close_at = name.find("]", open_at)
        if close_at < 0:  # _split_top_level already rejects this; kept for direct callers
            raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
        pieces.append([name[pos:open_at]])
        pieces.append(_expand_range_list(name[open_at + 1 : close_at], expr))
        pos = close_at + 1
    total = 1
    for piece in pieces:
        total *= len(piece)
    if total > _MAX_EXPANDED:
        raise HostlistError(f"hostlist {expr!r} expands to too many names")
    return ["".join(combo) for combo in product(*pieces)]


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression into names, in the order written.

    Duplicates are kept (Slurm keeps them too); empty input gives ``[]``. ``(null)`` — what
    ``scontrol`` prints for an empty set — also gives ``[]``.

    Raises:
        HostlistError: unbalanced or nested brackets, a non-numeric or descending range, or an
            expansion larger than one million names.
    """
    expr = expr.strip()
    if not expr or expr == "(null)":
        return []
    names: list[str] = []
    for part in _split_top_level(expr):
        part = part.strip()
        if not part:
            continue
        names.extend(_expand_one(part, expr))
    return names


@lru_cache(maxsize=65536)
def natural_key(name: str) -> tuple[object, ...]:
    """Sort key that orders ``node2`` before ``node10`` (digit runs compare as numbers)."""
    key: list[object] = []
    for text, digits in re.findall(r"(\D*)(\d*)", name):
        if text:
            key.append((0, text))
        if digits:
            key.append((1, int(digits), len(digits)))
    return tuple(key)


def compress_hostlist(names: Iterable[str]) -> str:
    """Compress names into one Slurm hostlist expression (the inverse of :func:`expand_hostlist`).

    Names are deduplicated and grouped by the text around their LAST digit run, then sorted
    naturally; consecutive numbers join a range only when the range's padding reproduces each
    name exactly, so ``expand_hostlist(compress_hostlist(xs))`` gives back the same set of names.
    """
    unique = sorted(set(names), key=natural_key)
    plain: list[str] = []
    groups: dict[tuple[str, str], list[str]] = {}
    for name in unique:
        m = _LAST_DIGITS.match(name)
        if m is None or any(ch in name for ch in "[],"):
            plain.append(name)
            continue
        groups.setdefault((m.group(1), m.group(3)), []).append(m.group(2))

    rendered: list[tuple[tuple[object, ...], str]] = [(natural_key(p), p) for p in plain]
    for (prefix, suffix), digit_strings in groups.items():
        digit_strings.sort(key=lambda d: (int(d), len(d)))
        ranges: list[tuple[str, str]] = []  # (first, last) as written
        for digits in digit_strings:
            if ranges:
                first, last = ranges[-1]
                nxt = int(last) + 1
                if int(digits) == nxt and str(nxt).zfill(len(first)) == digits:
                    ranges[-1] = (first, digits)
                    continue
            ranges.append((digits, digits))
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            text = f"{prefix}{ranges[0][0]}{suffix}"
        else:
            body = ",".join(first if first == last else f"{first}-{last}" for first, last in ranges)
            text = f"{prefix}[{body}]{suffix}"
        rendered.append((natural_key(f"{prefix}{digit_strings[0]}{suffix}"), text))
    rendered.sort(key=lambda item: item[0])
    return ",".join(text for _, text in rendered)
