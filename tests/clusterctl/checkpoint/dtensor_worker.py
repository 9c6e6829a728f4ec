"""One rank of a DTensor test: ``python dtensor_worker.py MODE URI RANK WORLD PORT`` (gloo on CPU).

``save``: a seeded model under FSDP2 ``fully_shard`` on a 1-D mesh of WORLD ranks (tensor-parallel
style for the last layer on 2+ ranks) saves its state dict. ``load``: a fresh model at this mesh
restores it with its own state dict as the template and checks every full tensor against the seeded
model. ``plain``: one process without torch.distributed loads it into an unsharded model.
Prints one JSON line.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from clusterctl.checkpoint import CheckpointConfig, CheckpointManager


def seeded() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))


def main() -> None:
    mode, uri, rank, world, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    config = CheckpointConfig(commit_timeout=60, poll_initial=0.01, run_id=f"dt{world}", gc_on_commit=False)
    reference = seeded()
    if mode == "plain":
        with CheckpointManager(uri, rank=0, world_size=1, config=config) as ckpt:
            state = ckpt.restore()
        reference.load_state_dict(state["model"])  # raises if anything is missing or misshaped
        same = all(
            torch.equal(a, b) for a, b in zip(seeded().state_dict().values(), state["model"].values(), strict=True)
        )
        print(json.dumps({"ok": same, "step": ckpt.last_restored_step}), flush=True)
        return
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    if mode == "partial":
        print(json.dumps(partial_template(uri, config, mesh)), flush=True)
        dist.destroy_process_group()
        return
    model = seeded()
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh)
    extra = {
        "tp_col": distribute_tensor(torch.arange(14.0).reshape(2, 7), mesh, [Shard(1)]),
        "repl": distribute_tensor(torch.ones(3), mesh, [Replicate()]),
    }
    with CheckpointManager(uri, config=config) as ckpt:
        if mode == "save":
            ckpt.save(5, {"model": model.state_dict(), "extra": extra}).result()
            print(json.dumps({"ok": True}), flush=True)
        else:
            if rank == 0:
                torch.manual_seed(1)
            for p in model.parameters():  # other values, so the check below means something
                p.data.zero_()
            state = ckpt.restore(template={"model": model.state_dict(), "extra": extra})
            model.load_state_dict(state["model"])
            full = {k: v.full_tensor() for k, v in model.state_dict().items()}
            same = all(torch.equal(full[k], v) for k, v in seeded().state_dict().items())
            got = state["extra"]
            same = same and torch.equal(got["tp_col"].full_tensor(), torch.arange(14.0).reshape(2, 7))
            same = same and torch.equal(
                got["repl"].full_tensor() if hasattr(got["repl"], "full_tensor") else got["repl"], torch.ones(3)
            )
            print(
                json.dumps(
                    {"ok": same, "step": ckpt.last_restored_step, "local0": list(model[0].weight.to_local().shape)}
                ),
                flush=True,
            )
    dist.destroy_process_group()


def partial_template(uri: str, config: CheckpointConfig, mesh: object) -> dict[str, object]:
    """Restore valid steps with a template whose placement cannot be restored into."""
    import warnings

    from torch.distributed.tensor import DTensor, Partial

    from clusterctl.checkpoint import CheckpointFallbackWarning, RestoreError

    with CheckpointManager(uri, config=config) as ckpt:
        for step in (1, 2):
            ckpt.save(step, {"w": torch.arange(4.0)}).result()
        template = {"w": DTensor.from_local(torch.zeros(4), mesh, [Partial()], run_check=False)}
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                ckpt.restore(template=template)
                error, kind = "", ""
            except Exception as exc:
                error, kind = str(exc), type(exc).__name__
    fallbacks = sum(issubclass(w.category, CheckpointFallbackWarning) for w in seen)
    return {"ok": kind == RestoreError.__name__, "kind": kind, "error": error, "fallbacks": fallbacks}


if __name__ == "__main__":
    main()
