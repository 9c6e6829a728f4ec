"""One rank of a tiered checkpoint test: ``python tier_worker.py SPEC_JSON``, rank from SLURM_PROCID.

Saves real torch state (a module and its AdamW state, different per rank) at the spec's steps, or
restores the newest step and prints whether it matches what that rank saved.
"""

from __future__ import annotations

import json
import os
import sys

import torch

from clusterctl.checkpoint import CheckpointConfig, CheckpointManager


def model(rank: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(rank)
    net = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.Tanh(), torch.nn.Linear(512, 4))
    opt = torch.optim.AdamW(net.parameters())
    net(torch.randn(8, 32)).sum().backward()
    opt.step()
    return net, opt


def main() -> None:
    spec = json.loads(sys.argv[1])
    rank = int(os.environ["SLURM_PROCID"])
    config = CheckpointConfig(commit_timeout=30, poll_initial=0.02, poll_max=0.2, gc_on_commit=False)
    with CheckpointManager(spec["uri"], config=config, tier="memory") as ckpt:
        net, opt = model(rank)
        if spec.get("save"):
            for step in spec["save"]:
                print(json.dumps({"step": step, "committed": ckpt.save(step, {"m": net, "o": opt}).result().committed}))
            return
        fresh = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.Tanh(), torch.nn.Linear(512, 4))
        fresh_opt = torch.optim.AdamW(fresh.parameters())
        step = ckpt.restore(into={"m": fresh, "o": fresh_opt})
        same = all(torch.equal(a, b) for a, b in zip(net.parameters(), fresh.parameters(), strict=True))
        print(json.dumps({"restored": step, "same": same}))


if __name__ == "__main__":
    main()
