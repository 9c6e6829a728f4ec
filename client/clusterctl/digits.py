"""ASCII decimal numbers: the one test for "is this text a number someone typed".

``str.isdigit`` and ``int`` accept far more than ``0-9`` (``'١٢'``, ``'²'``, ``'1_000'``, spaces),
so a number from a caller or from Slurm is matched against ``[0-9]+`` before ``int`` sees it.
"""

from __future__ import annotations

import re

_DIGITS = re.compile(r"[0-9]+\Z")


def is_digits(text: str) -> bool:
    """True for one or more ASCII digits and nothing else (no sign, space, underscore)."""
    return _DIGITS.match(text) is not None


def parse_digits(text: str) -> int | None:
    """``"042"`` -> 42; None unless ``text`` is ASCII digits only."""
    return int(text, 10) if is_digits(text) else None
