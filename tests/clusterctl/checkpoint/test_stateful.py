"""Objects with state_dict()/load_state_dict() saved as torch.distributed.checkpoint takes them, and
restored in place with restore(into=...): plain modules in one process, DDP and FSDP2 over gloo at
another world size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusterctl.checkpoint import CheckpointManager, InvalidStateError, RestoreError
from tests.support.ports import free_port

from .helpers import GatedStorage, fast_config

torch = pytest.importorskip("torch")
WORKER = str(Path(__file__).with_name("stateful_worker.py"))


class Tied(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(5, 4)
        self.head = torch.nn.Linear(4, 5, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: Any) -> Any:
        return self.head(self.emb(x))


def trained() -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = Tied()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    model(torch.tensor([1, 2])).sum().backward()
    opt.step()
    sched.step()
    return model, opt, sched


def test_restore_into_loads_in_place_and_returns_the_step(posix_uri: str) -> None:
    model, opt, sched = trained()
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        assert ckpt.restore(into={"model": Tied()}) is None  # nothing committed yet
        ckpt.save(7, {"model": model, "optim": opt, "sched": sched, "meta": {"epoch": 3}}).result()
        torch.manual_seed(1)
        model2 = Tied()
        opt2 = torch.optim.AdamW(model2.parameters(), lr=0.1)
        sched2 = torch.optim.lr_scheduler.StepLR(opt2, step_size=1, gamma=0.5)
        meta: dict[str, Any] = {}
        assert ckpt.restore(into={"model": model2, "optim": opt2, "sched": sched2, "meta": meta}) == 7
    assert torch.equal(model2.emb.weight, model.emb.weight) and model2.head.weight is model2.emb.weight
    assert torch.equal(opt2.state[model2.emb.weight]["exp_avg"], opt.state[model.emb.weight]["exp_avg"])
    assert float(opt2.state[model2.emb.weight]["step"]) == 1.0 and opt2.param_groups[0]["lr"] == 0.05
    assert sched2.last_epoch == 1 and meta == {"epoch": 3}


def test_a_step_and_a_write_after_save_returns_stay_out_of_the_checkpoint() -> None:
    """save() returns once the bytes are copied: while the shard is still unwritten, the trainer's next
    optimizer step (in place: weights, exp_avg, exp_avg_sq, step) and its own in-place write change
    nothing in the checkpoint."""
    model, opt, _ = trained()
    weight = model.emb.weight
    at_save = {"weight": weight.detach().clone(), **{k: v.clone() for k, v in opt.state[weight].items()}}
    storage = GatedStorage()
    with CheckpointManager("/unused", rank=0, world_size=1, keep=0, storage=storage, config=fast_config()) as ckpt:
        handle = ckpt.save(1, {"model": model, "optim": opt})
        model(torch.tensor([3, 4])).sum().backward()
        opt.step()
        with torch.no_grad():
            weight[0].fill_(42.0)
        assert not handle.done()  # the shard write waits at the gate: nothing is stored yet
        storage.gate.set()
        handle.result(timeout=30)
        torch.manual_seed(1)
        model2 = Tied()
        opt2 = torch.optim.AdamW(model2.parameters(), lr=0.1)
        assert ckpt.restore(into={"model": model2, "optim": opt2}) == 1
    now = {"weight": weight.detach(), **opt.state[weight]}
    got = {"weight": model2.emb.weight.detach(), **opt2.state[model2.emb.weight]}
    for key, value in at_save.items():
        assert not torch.equal(now[key], value), key  # the trainer did change it after save()
        assert torch.equal(got[key], value), key  # the checkpoint holds it as it was at save()


def test_tied_weights_are_stored_once_and_come_back_tied(posix_uri: str) -> None:
    model, _, _ = trained()
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(1, {"model": model}).result()
        state = ckpt.restore()
    assert list(state["model"]) == ["emb.weight", "head.weight"]
    assert state["model"]["head.weight"] is state["model"]["emb.weight"]
    from safetensors import safe_open

    [shard] = Path(posix_uri).glob("steps/*/*/*.safetensors")
    assert list(safe_open(str(shard), "np").keys()) == ["model/emb.weight"]  # one tensor, not two


def test_keys_are_strict_unless_asked_otherwise(posix_uri: str) -> None:
    model, _, _ = trained()
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(1, {"model": model}).result()
        with pytest.raises(RestoreError, match=r"step 1 has no 'optim' \(it holds 'model'\)"):
            ckpt.restore(into={"model": Tied(), "optim": {}})
        with pytest.raises(RestoreError, match=r"loading 'model' into its Linear failed: .*Missing key\(s\)"):
            ckpt.restore(into={"model": torch.nn.Linear(4, 5)})
        bigger = torch.nn.Sequential()
        bigger.add_module("emb", torch.nn.Embedding(5, 4))
        bigger.add_module("extra", torch.nn.Linear(2, 2))
        assert ckpt.restore(into={"model": bigger, "optim": {}}, strict=False) == 1
        assert torch.equal(bigger.emb.weight, model.emb.weight)


def test_bad_input_is_refused_with_its_key(posix_uri: str) -> None:
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        with pytest.raises(InvalidStateError, match=r"^s: sparse tensors \(torch.sparse_coo\) cannot be saved"):
            ckpt.save(1, {"s": torch.eye(3).to_sparse()})
        with pytest.raises(InvalidStateError, match=r"^optim: an optimizer is saved with the module it optimizes"):
            ckpt.save(1, {"optim": torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)})
        with pytest.raises(TypeError, match="'model' is a Tensor"):
            ckpt.restore(into={"model": torch.zeros(2)})
        with pytest.raises(TypeError, match="not both"):
            ckpt.restore(into={}, template={})


def run(mode: str, kind: str, uri: str, world: int) -> list[dict[str, Any]]:
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "CLUSTERCTL_"))}
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, mode, kind, uri, str(r), str(world), port],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=180)
        assert p.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


@pytest.mark.parametrize(("kind", "saved", "now"), [("ddp", 2, 3), ("fsdp", 2, 3)])
def test_data_parallel_state_restores_at_another_world_size(tmp_path: Path, kind: str, saved: int, now: int) -> None:
    uri = str(tmp_path / "ckpt")
    before = run("save", kind, uri, saved)
    after = run("load", kind, uri, now)
    for out in after:
        assert out["step"] == 2 and out["stepped"] == 3, out
        for field in ("model", "optim", "lr", "epoch", "app"):
            assert out[field] == before[0][field], field
    assert before[0]["optim"]["0.weight"]["step"] == [2.0]
    if kind == "ddp":  # replicas stored once: no tensor name appears in two ranks' shards
        from safetensors import safe_open

        names = [set(safe_open(str(p), "np").keys()) for p in sorted(Path(uri).glob("steps/*/*/*.safetensors"))]
        assert len(names) == saved and sum(map(len, names)) == len(set().union(*names))
