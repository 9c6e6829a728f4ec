"""What trainers save, as they have it: model + AdamW + LR scheduler + RNG states, and training goes on
bit-identically after a restore into fresh objects. Plus the type matrix of the public contract."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from clusterctl.checkpoint import CheckpointManager

from .helpers import fast_config
from .test_roundtrip import assert_same

torch = pytest.importorskip("torch")


def make(seed: int = 0) -> tuple[Any, Any, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def train(model: Any, opt: Any, sched: Any, steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 8)
        noise = float(np.random.standard_normal()) + random.random()
        loss = ((model(x) - noise) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def snapshot(model: Any, opt: Any, sched: Any) -> dict[str, Any]:
    return {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "sched": sched.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
    }


def test_training_continues_bit_identically(any_uri: str) -> None:
    random.seed(1)
    np.random.seed(1)
    model, opt, sched = make()
    train(model, opt, sched, 3)
    with CheckpointManager(any_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(3, snapshot(model, opt, sched)).result()
        expected = train(model, opt, sched, 4)
        final = [p.detach().clone() for p in model.parameters()]
        state = ckpt.restore()
    assert isinstance(next(iter(state["optim"]["state"])), int)  # int param ids stay int
    assert isinstance(state["rng"]["numpy"], tuple) and isinstance(state["rng"]["python"], tuple)
    model2, opt2, sched2 = make(seed=123)  # fresh objects, other weights
    model2.load_state_dict(state["model"])
    opt2.load_state_dict(state["optim"])
    sched2.load_state_dict(state["sched"])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    assert train(model2, opt2, sched2, 4) == expected
    for a, b in zip(final, model2.parameters(), strict=True):
        assert torch.equal(a, b.detach())


EVERY_TORCH_DTYPE = [
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex64",
    "complex128",
    "complex32",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
    "bits8",
    "bits16",
]


def torch_value(name: str, shape: tuple[int, ...]) -> Any:
    dtype = getattr(torch, name)
    size = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 2 if name == "bool" else 255, (math.prod(shape) * size,), dtype=torch.uint8)
    return raw.view(dtype).reshape(shape)


def same_tensor(a: Any, b: Any) -> None:
    assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype)
    size = a.element_size()
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}[size]
    ca, cb = a.contiguous(), b.contiguous()
    if size == 16:
        ca, cb = torch.view_as_real(ca), torch.view_as_real(cb)
    assert torch.equal(ca.view(as_int), cb.view(as_int))


@pytest.mark.parametrize("name", EVERY_TORCH_DTYPE)
def test_every_torch_dtype_and_view(posix_uri: str, name: str) -> None:
    base = torch_value(name, (6, 4))
    state = {"t": base, "view": base.t()[1:3], "scalar": base[2, 1].clone(), "empty": base[:0]}
    with CheckpointManager(posix_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(1, state).result()
        out = ckpt.restore()
    for k, v in state.items():
        same_tensor(v, out[k])


def test_containers_keys_and_scalars(any_uri: str) -> None:
    state: dict[Any, Any] = {
        0: {"step": 3, 1: (torch.tensor(2.0), None)},
        "0": "str zero beside int zero",
        "tuple": (1, 2.5, "x", (True, False)),
        "list": [None, [1, 2], {"a": b"\x00\xff"}],
        "floats": [math.inf, -math.inf, -0.0, 1e300],
        "nan": math.nan,
        "bytes": b"abc",
        "ba": bytearray(b"de"),
        "np_scalar": np.float32(1.5),
        "np0d": np.array(7, dtype=np.int16),
        "t0d": torch.tensor(5, dtype=torch.int64),
        "nested_tuple": ((np.arange(3), torch.arange(2)), []),
    }
    with CheckpointManager(any_uri, rank=0, world_size=1, config=fast_config()) as ckpt:
        ckpt.save(1, state).result()
        out = ckpt.restore()
    assert list(out) == list(state)
    assert isinstance(out[0][1], tuple) and out[0][1][1] is None and torch.equal(out[0][1][0], torch.tensor(2.0))
    for key in ("t0d",):
        assert torch.equal(out[key], state[key])
    assert isinstance(out["nested_tuple"][0][1], torch.Tensor)
    plain = {k: v for k, v in state.items() if k not in (0, "t0d", "nested_tuple")}
    assert_same(plain, {k: out[k] for k in plain})
