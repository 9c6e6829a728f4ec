"""Benchmarks, run from the project root as modules (``python -m bench.submit``; see bench/README.md),
so that they import the test helpers in tests.support without touching sys.path."""
