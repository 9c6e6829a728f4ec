"""Slurm release numbers and the OpenAPI/data_parser version each release speaks.

The pyslurm backend needs this to refuse a pyslurm built for another release, and ``clusterd
check`` names the JSON/REST version the running release speaks (what ``slurm.restd_api_version``
would be set to). The table is the NEWEST data_parser a release ships (each release also
keeps the two or three before it). Sources: SchedMD's rest_release_notes (25.11.1 lists
data_parser/v0.0.44), the 25.05.0rc1 changelog (deprecations "in v0.0.43"), the 24.05.3 changelog
(fixes to v0.0.40 and v0.0.41), the 26.05.0rc1 changelog (data_parser/v0.0.45 fixes) and the
``src/plugins/data_parser/v0.0.4x`` directories of the Slurm tree (v0.0.46 exists only on master,
for the unreleased 26.11). 22.05 predates data_parser: its ``openapi/v0.0.38`` plugin prints the
flat, plain-number JSON our captures show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION_RE = re.compile(r"([0-9]{2})\.([0-9]{1,2})(?:\.([0-9]+))?")

# (major, minor) -> newest OpenAPI/data_parser version that release speaks.
DATA_PARSER_BY_RELEASE: dict[tuple[int, int], str] = {
    (20, 11): "v0.0.36",
    (21, 8): "v0.0.37",
    (22, 5): "v0.0.38",
    (23, 2): "v0.0.39",
    (23, 11): "v0.0.40",
    (24, 5): "v0.0.41",
    (24, 11): "v0.0.42",
    (25, 5): "v0.0.43",
    (25, 11): "v0.0.44",
    (26, 5): "v0.0.45",
}


class SlurmVersionError(ValueError):
    pass


@dataclass(frozen=True, order=True)
class SlurmVersion:
    """A Slurm release, comparable: ``SlurmVersion(22, 5, 8) < SlurmVersion(26, 5, 0)``."""

    major: int
    minor: int
    micro: int = 0

    @classmethod
    def parse(cls, text: str) -> SlurmVersion:
        """Read ``slurm 22.05.8``, ``slurm-wlm 22.05.8``, ``26.05.0-pre1``, ``25.11`` or ``24-11-1-1``."""
        normalized = re.sub(r"(?<=\d)-(?=\d)", ".", text.strip())  # git tags: slurm-24-11-1-1
        m = _VERSION_RE.search(normalized)
        if not m:
            raise SlurmVersionError(f"cannot read a Slurm version from {text.strip()[:80]!r}")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))

    @property
    def release(self) -> tuple[int, int]:
        """The major release (what ABI and data_parser compatibility depend on)."""
        return (self.major, self.minor)

    @property
    def data_parser(self) -> str:
        """Newest OpenAPI/data_parser version this release speaks, e.g. ``"v0.0.45"``.

        A release newer than the table is assumed to speak at least the newest version we know;
        one older than 20.11 has no usable JSON at all.
        """
        known = sorted(DATA_PARSER_BY_RELEASE)
        if self.release in DATA_PARSER_BY_RELEASE:
            return DATA_PARSER_BY_RELEASE[self.release]
        if self.release > known[-1]:
            return DATA_PARSER_BY_RELEASE[known[-1]]
        older = [r for r in known if r < self.release]
        if not older:
            raise SlurmVersionError(f"Slurm {self} predates JSON output (20.11)")
        return DATA_PARSER_BY_RELEASE[older[-1]]

    def same_release(self, other: SlurmVersion) -> bool:
        return self.release == other.release

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"
