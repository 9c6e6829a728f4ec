"""docs/sbatch-options.md is what the code's option table and renderers say."""

from __future__ import annotations

from pathlib import Path

from clusterctl.sbatch.options import SBATCH_LONG
from clusterd.jobs import option_docs

DOC = Path(__file__).resolve().parents[3] / "docs" / "sbatch-options.md"


def test_the_page_is_generated_from_the_table() -> None:
    assert DOC.read_text() == option_docs.render(), (
        "docs/sbatch-options.md is stale: python -m clusterd.jobs.option_docs > docs/sbatch-options.md"
    )


def test_every_option_has_a_row_and_a_sample() -> None:
    text = option_docs.render()
    for option in SBATCH_LONG:
        assert f"`--{option}" in text, option
    assert set(option_docs.SAMPLES) == set(option_docs.ACCEPTED)
