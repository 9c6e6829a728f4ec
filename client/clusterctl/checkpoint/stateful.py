"""Objects with ``state_dict()``/``load_state_dict()`` in a saved state, as torch.distributed.checkpoint
takes them.

A value at the top level of a state that has both methods is saved as its state dict and, with
``restore(into=...)``, loaded back in place. Modules and optimizers go through torch's distributed
state-dict API (``torch.distributed.checkpoint.state_dict``), which strips DDP's ``module.`` prefix,
keeps FSDP2 parameters and optimizer state as DTensors and keys optimizer state by parameter name:

* a DDP module, or one with DTensor parameters (FSDP2, tensor parallel), is data parallel: its
  plain tensors (DDP weights, buffers, AdamW's scalar ``step``) are the same on every rank and are
  saved as :class:`~.parallel.Replicated` (stored once), its DTensors as their own shards; the
  optimizers of its parameters likewise. Such a state restores at any world size.
* any other object (a plain module, a scheduler, the caller's own state) is saved as each rank
  has it; ``restore(into=...)`` gives each rank its own value at the same world size and rank 0's
  at another.

Everything torch-specific is imported only when a module or optimizer is in the state.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from . import torchcompat
from .errors import InvalidStateError, RestoreError
from .parallel import Replicated


def is_stateful(obj: object) -> bool:
    """True for an object DCP would call ``state_dict()`` on (not a mapping, not a tensor)."""
    if isinstance(obj, Mapping) or torchcompat.is_tensor(obj):
        return False
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def has_stateful(state: Mapping[Any, Any]) -> bool:
    return any(is_stateful(v) for v in state.values())


def _torch_kinds(obj: object) -> tuple[bool, bool]:
    """(is a torch module, is a torch optimizer), without importing torch."""
    torch = torchcompat.loaded_torch()
    if torch is None:
        return False, False
    return isinstance(obj, torch.nn.Module), isinstance(obj, torch.optim.Optimizer)


def _data_parallel(module: Any) -> bool:
    """DDP, or parameters that are DTensors (FSDP2, tensor parallel): plain tensors are replicas."""
    torch = torchcompat.loaded_torch()
    if torch is None:
        return False
    if isinstance(module, torch.nn.parallel.DistributedDataParallel):
        return True
    return any(torchcompat.is_dtensor(p) for p in module.parameters())


def _owner(key: str, optimizer: Any, modules: Mapping[str, Any]) -> Any:
    """The module whose parameters ``optimizer`` updates (torch's API needs it to name the state)."""
    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for module in modules.values():
        if params and params <= {id(p) for p in module.parameters()}:
            return module
    names = ", ".join(repr(k) for k in modules) or "none"
    raise InvalidStateError(
        f"{key}: an optimizer is saved with the module it optimizes, in the same state; no module of this "
        f"state ({names}) holds all of its parameters"
    )


def _module_options(*, strict: bool = True) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=False, cpu_offload=False, strict=strict)


def to_state(state: Mapping[Any, Any], world_size: int) -> dict[Any, Any]:
    """``state`` with every stateful value replaced by what it saves.

    Raises:
        InvalidStateError: an optimizer without its module, or a ``state_dict()`` that fails.
    """
    modules = {k: v for k, v in state.items() if _torch_kinds(v)[0]}
    out: dict[Any, Any] = {}
    for key, value in state.items():
        if not is_stateful(value):
            out[key] = value
            continue
        is_module, is_optimizer = _torch_kinds(value)
        try:
            if is_module or is_optimizer:
                from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

                model = value if is_module else _owner(str(key), value, modules)
                sd = (
                    get_model_state_dict(model, options=_module_options())
                    if is_module
                    else get_optimizer_state_dict(model, value, options=_module_options())
                )
                out[key] = Replicated(sd) if world_size > 1 and _data_parallel(model) else sd
            else:
                out[key] = value.state_dict()
        except InvalidStateError:
            raise
        except Exception as exc:
            raise InvalidStateError(f"{key}: state_dict() of {type(value).__name__} failed: {exc}") from exc
    return out


def template_for(into: Mapping[str, Any]) -> dict[str, Any]:
    """The restore template of ``into``: the modules' and optimizers' own state dicts (their DTensors
    say which slice this rank wants, and are filled in place), None for everything else."""
    modules = {k: v for k, v in into.items() if _torch_kinds(v)[0]}
    template: dict[str, Any] = {}
    for key, value in into.items():
        is_module, is_optimizer = _torch_kinds(value)
        if not (is_module or is_optimizer):
            template[key] = None
            continue
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        if is_module:
            template[key] = get_model_state_dict(value, options=_module_options())
        else:  # a fresh optimizer's state is created here, as torch's API does before loading into it
            template[key] = get_optimizer_state_dict(_owner(key, value, modules), value, options=_module_options())
    return template


def check_into(into: object) -> Mapping[str, Any]:
    """``into`` must map names to stateful objects or to mutable mappings (filled in place).

    Raises:
        TypeError: anything else, naming the key.
    """
    if not isinstance(into, Mapping):
        raise TypeError(f"restore(into=...) takes a dict of objects with load_state_dict(), got {type(into).__name__}")
    for key, value in into.items():
        if not (is_stateful(value) or isinstance(value, MutableMapping)):
            raise TypeError(
                f"restore(into=...): {key!r} is a {type(value).__name__}; give objects with load_state_dict() "
                "(modules, optimizers, schedulers, your own) or dicts to fill"
            )
    return into


def load_into(into: Mapping[str, Any], state: Mapping[Any, Any], *, step: int, strict: bool) -> None:
    """Load a restored ``state`` into the objects of ``into``.

    Raises:
        RestoreError: a key of ``into`` is not in the checkpoint (when ``strict``), or an object
            refused its state (names the key and torch's reason: missing or unexpected keys, shapes).
    """
    missing = [k for k in into if k not in state]
    if missing and strict:
        raise RestoreError(
            f"step {step} has no {', '.join(repr(k) for k in missing)} (it holds "
            f"{', '.join(repr(k) for k in state) or 'nothing'}); restore with strict=False to load the rest"
        )
    modules = {k: v for k, v in into.items() if _torch_kinds(v)[0]}
    for key, obj in into.items():
        if key not in state:
            continue
        value = state[key]
        is_module, is_optimizer = _torch_kinds(obj)
        try:
            if is_module:
                from torch.distributed.checkpoint.state_dict import set_model_state_dict

                set_model_state_dict(obj, value, options=_module_options(strict=strict))
            elif is_optimizer:
                from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

                set_optimizer_state_dict(_owner(key, obj, modules), obj, value, options=_module_options(strict=strict))
            elif is_stateful(obj):
                obj.load_state_dict(value)
            else:
                obj.clear()
                obj.update(value)
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            reason = " ".join(str(exc).split())  # torch's multi-line report on one line
            raise RestoreError(f"step {step}: loading {key!r} into its {type(obj).__name__} failed: {reason}") from exc
