"""Where the checkout's files are, so that tests find them wherever in tests/ they sit."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SLURM_FIXTURES = ROOT / "tests" / "fixtures" / "slurm"  # captured Slurm output (see its README.md)
