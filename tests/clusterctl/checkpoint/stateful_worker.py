"""One rank of a stateful-save test: ``python stateful_worker.py MODE KIND URI RANK WORLD PORT`` (gloo, CPU).

KIND ``ddp`` wraps a seeded MLP in DistributedDataParallel, ``fsdp`` shards it with FSDP2
``fully_shard``; both train with AdamW and a StepLR schedule. MODE ``save`` trains two steps and
saves the model, optimizer, scheduler and an object of its own as they are at step 2, then, while
that save is in flight, takes a third step and negates the weights in place (neither may reach the
checkpoint); ``load`` builds everything afresh (other weights), restores into it, then trains one
more step. Prints one JSON line: the full model and optimizer state (gathered; at the save), the
schedule and the object's counter.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from clusterctl.checkpoint import CheckpointConfig, CheckpointManager


class Counter:
    """The caller's own state: anything with state_dict()/load_state_dict()."""

    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = int(state["n"])


def build(kind: str, seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(seed)
    model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    if kind == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        fully_shard(model[0])
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    return model, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, sched: Any, step: int) -> None:
    torch.manual_seed(100 + step * 10 + dist.get_rank())
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    sched.step()


def summary(model: torch.nn.Module, opt: torch.optim.Optimizer, sched: Any, app: Counter) -> dict[str, Any]:
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    optim = {k: {n: v.flatten().tolist() for n, v in s.items()} for k, s in osd["state"].items()}
    return {
        "model": {k: v.flatten().tolist() for k, v in msd.items()},
        "optim": optim,
        "lr": sched.get_last_lr(),
        "epoch": sched.last_epoch,
        "app": app.n,
    }


def main() -> None:
    mode, kind, uri = sys.argv[1], sys.argv[2], sys.argv[3]
    rank, world, port = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    config = CheckpointConfig(commit_timeout=60, poll_initial=0.01, poll_max=0.1, gc_on_commit=False)
    model, opt, sched = build(kind, seed=0 if mode == "save" else 1)
    app = Counter()
    out: dict[str, Any] = {}
    with CheckpointManager(uri, config=config) as ckpt:
        if mode == "save":
            for step in (1, 2):
                train_step(model, opt, sched, step)
                app.n += 1
            out = summary(model, opt, sched, app)
            handle = ckpt.save(2, {"model": model, "optim": opt, "sched": sched, "app": app})
            train_step(model, opt, sched, 3)  # right after save() returns: none of this is in step 2
            app.n += 1
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(-1.0)
            handle.result()
        else:
            out["step"] = ckpt.restore(into={"model": model, "optim": opt, "sched": sched, "app": app})
            out |= summary(model, opt, sched, app)
            train_step(model, opt, sched, 3)  # the optimizer takes its restored state as its own
            out["stepped"] = sched.last_epoch
    dist.destroy_process_group()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
