"""Suite-wide settings. Integration fixtures live in tests/integration/conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

# tests/ helpers (s3server.py, fakes) are importable as top-level modules.
sys.path.insert(0, str(Path(__file__).parent))
