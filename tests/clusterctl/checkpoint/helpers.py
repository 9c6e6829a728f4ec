"""Shared settings and storage fakes for checkpoint tests."""

from __future__ import annotations

import threading

from clusterctl.checkpoint import CheckpointConfig
from clusterctl.storage import MemoryStorage

# Small parts so that multi-part paths run on small states; short deadlines so faults fail fast.
FAST = dict(
    part_size=5 << 20,
    max_concurrency=4,
    commit_timeout=20.0,
    poll_initial=0.02,
    poll_max=0.2,
    connect_timeout=2.0,
    read_timeout=10.0,
    max_attempts=2,
)


def fast_config(**kw: object) -> CheckpointConfig:
    args: dict[str, object] = dict(FAST)
    args.update(kw)
    return CheckpointConfig(**args)  # type: ignore[arg-type]


class GatedStorage(MemoryStorage):
    """Shard writes wait on a gate, so a save stays in flight as long as a test needs."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.fault = self._gate

    def _gate(self, op: str, key: str) -> None:
        if op == "put" and key.endswith(".safetensors"):
            assert self.gate.wait(30)
