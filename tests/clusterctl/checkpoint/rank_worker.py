"""One rank of a multi-process checkpoint test, run as ``python rank_worker.py SPEC_JSON``.

The spec says which steps to save and whether to die (SIGKILL itself) in the middle of the
upload of one step. Rank and world size come from SLURM_PROCID/SLURM_NTASKS, the run id from
SLURM_JOB_ID, exactly as under srun. Prints one JSON line per step with the outcome.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import numpy as np

from clusterctl.checkpoint import CheckpointConfig, CheckpointManager, SaveError


def rank_state(rank: int, step: int, size: int) -> dict[str, Any]:
    rng = np.random.default_rng(1000 * rank + step)
    return {
        "w": rng.standard_normal(size).astype(np.float32),
        "rank": rank,
        "step": step,
        "nested": {"ids": np.full(3, rank, dtype=np.int64)},
    }


def main() -> None:
    spec = json.loads(sys.argv[1])
    config = CheckpointConfig(
        part_size=5 << 20,
        max_concurrency=2,
        commit_timeout=spec.get("commit_timeout", 30),
        poll_initial=0.02,
        poll_max=0.2,
        max_attempts=2,
        connect_timeout=2,
        read_timeout=10,
        gc_on_commit=False,
    )
    ckpt = CheckpointManager(spec["uri"], keep=0, config=config)
    die_step = spec.get("die_at_step")
    if die_step is not None:
        client = getattr(ckpt.storage, "client", None)

        def die(**_: Any) -> None:
            if ckpt_step[0] == die_step:
                os.kill(os.getpid(), signal.SIGKILL)

        ckpt_step = [-1]
        if client is not None:
            client.meta.events.register("before-call.s3.UploadPart", die)
    for step in spec["steps"]:
        if die_step is not None:
            ckpt_step[0] = step
        try:
            res = ckpt.save(step, rank_state(ckpt.rank, step, spec.get("size", 1 << 20))).result()
            print(json.dumps({"step": step, "committed": res.committed}), flush=True)
        except SaveError as exc:
            print(json.dumps({"step": step, "error": str(exc), "type": type(exc).__name__}), flush=True)
    ckpt.close()


if __name__ == "__main__":
    main()
