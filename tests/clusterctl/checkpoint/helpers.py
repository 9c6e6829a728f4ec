"""Shared settings for checkpoint tests."""

from __future__ import annotations

from clusterctl.checkpoint import CheckpointConfig

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
