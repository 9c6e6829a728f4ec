"""Slurm version strings and the data_parser version each release speaks."""

from __future__ import annotations

import pytest

from clusterd.slurm.version import DATA_PARSER_BY_RELEASE, SlurmVersion, SlurmVersionError
from tests.support.paths import SLURM_FIXTURES


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("slurm 22.05.8", SlurmVersion(22, 5, 8)),
        ("slurm-wlm 22.05.8\n", SlurmVersion(22, 5, 8)),
        ("26.05.0-pre1", SlurmVersion(26, 5, 0)),
        ("25.11", SlurmVersion(25, 11, 0)),
        ("slurm-24-11-1-1", SlurmVersion(24, 11, 1)),
    ],
)
def test_parse(text: str, version: SlurmVersion) -> None:
    assert SlurmVersion.parse(text) == version


def test_capture_and_ordering() -> None:
    here = SlurmVersion.parse((SLURM_FIXTURES / "sbatch_version.txt").read_text())
    assert str(here) == "22.05.8" and here.release == (22, 5)
    assert SlurmVersion(22, 5, 8) < SlurmVersion(23, 2, 0) < SlurmVersion(26, 5, 0)
    assert here.same_release(SlurmVersion(22, 5, 0)) and not here.same_release(SlurmVersion(25, 11, 2))
    with pytest.raises(SlurmVersionError):
        SlurmVersion.parse("sbatch: command not found")


@pytest.mark.parametrize(
    ("release", "api"),
    [
        ((22, 5), "v0.0.38"),
        ((23, 2), "v0.0.39"),
        ((23, 11), "v0.0.40"),
        ((24, 5), "v0.0.41"),
        ((24, 11), "v0.0.42"),
        ((25, 5), "v0.0.43"),
        ((25, 11), "v0.0.44"),
        ((26, 5), "v0.0.45"),
    ],
)
def test_data_parser_table(release: tuple[int, int], api: str) -> None:
    assert SlurmVersion(*release).data_parser == api


def test_unknown_releases() -> None:
    assert SlurmVersion(26, 11, 0).data_parser == "v0.0.45"  # newer than the table: newest we know
    assert SlurmVersion(23, 5, 0).data_parser == "v0.0.39"  # between releases: the older one's
    with pytest.raises(SlurmVersionError):
        _ = SlurmVersion(19, 5, 0).data_parser
    assert len(set(DATA_PARSER_BY_RELEASE.values())) == len(DATA_PARSER_BY_RELEASE)
