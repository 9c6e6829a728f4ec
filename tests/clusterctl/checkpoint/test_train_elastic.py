"""examples/train_elastic.py without Slurm: saved by 3 ranks, resumed by 2, state verified.

The end-to-end version (a node killed under a real -N 2-3 job) is tests/integration/test_elastic.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_elastic.py"


def run_world(ckpt: Path, world: int, steps: int, run_id: str) -> list[str]:
    """All ranks of one run at ``world`` ranks, as srun would start them; their output lines."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--ckpt", str(ckpt), "--steps", str(steps), "--every", "10"],
            env={**os.environ, "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "CLUSTERCTL_RUN_ID": run_id},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(world)
    ]
    lines = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        lines += out.splitlines()
    return lines


def test_three_ranks_save_and_two_resume_the_same_global_state(tmp_path: Path) -> None:
    first = run_world(tmp_path / "ckpt", 3, 25, "w3")
    assert sorted(line for line in first if line.startswith("START")) == [
        f"START fresh rank {r}/3 node -" for r in range(3)
    ]
    second = run_world(tmp_path / "ckpt", 2, 40, "w2")
    pattern = re.compile(r"RESUMED from step (\d+) rank (\d)/2 .* saved_world (\d)")
    resumed = sorted(m.groups() for line in second if (m := pattern.match(line)))
    assert resumed == [("19", "0", "3"), ("19", "1", "3")]  # the newest commit of the 3-rank run
    assert sorted(line for line in second if line.startswith("VERIFIED")) == [
        "VERIFIED restored step 19 rank 0/2 rows 0:7",
        "VERIFIED restored step 19 rank 1/2 rows 7:13",
    ]
    assert sum("final state verified" in line for line in second) == 2
