"""The README examples run on the real stack: reuse its fixture (skip/require logic included)."""

from integration.conftest import stack  # noqa: F401
