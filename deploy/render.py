"""The ``@KEY@`` template renderer of deploy/local/lib/common.sh (bash ``render``), in Python.

deploy/compose renders the very templates deploy/local uses, so the two stacks cannot drift; this
module is the Python side of that contract and keeps bash's semantics:

- ``@KEY@`` (``KEY`` matching ``[A-Z_]+``) is replaced by the value given for ``KEY``; values are
  inserted literally and may span lines.
- Trailing newlines of the template are dropped and exactly one is written (bash ``$(<file)`` then
  ``printf '%s\\n'``).
- Any placeholder left in the output is an error naming every missing key.

One deliberate difference: values are substituted in one pass, so a value is never re-scanned for
placeholders, and ``&`` in a value is kept as is (bash 5.2's patsub_replacement would expand it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

PLACEHOLDER = re.compile(r"@([A-Z_]+)@")


class RenderError(ValueError):
    """A template names a placeholder that no value was supplied for."""


def placeholders(text: str) -> set[str]:
    """The keys a template asks for (``@SLURMD_TIMEOUT@`` -> ``SLURMD_TIMEOUT``)."""
    return set(PLACEHOLDER.findall(text))


def render_text(text: str, values: Mapping[str, str], *, name: str = "template") -> str:
    """Substitute ``values`` into ``text``; raise :class:`RenderError` if a placeholder is left."""
    missing = sorted(placeholders(text) - set(values))
    if missing:
        raise RenderError(f"unrendered placeholder in {name}: " + " ".join(f"@{k}@" for k in missing))
    rendered = PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
    return rendered.rstrip("\n") + "\n"


def render_file(template: Path, values: Mapping[str, str]) -> str:
    """Render one template file to a string (the caller decides where it goes)."""
    return render_text(template.read_text(), values, name=str(template))
