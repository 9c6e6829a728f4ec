"""sbatch options beyond the basic resources, read into request fields: task layout, per-GPU and
per-socket amounts, sharing, scheduling and node options, and ``spec.sbatch_options`` itself.

Each value is read by the parser the CLI checks it with (:mod:`clusterctl.sbatch.values`).
"""

from __future__ import annotations

import re
from typing import Any

from clusterctl.sbatch import values as sbatch_values
from clusterd.errors import InvalidArgument
from clusterd.jobs.directives import Directive, parse_options
from clusterd.jobs.merged import MAX_CPUS, MAX_GPUS, MAX_MEMORY_MB, MAX_TASKS, Merged, typed_upto, upto
from clusterd.model.spec import JobSpec
from clusterd.slurm.request import Sharing

BEGIN_RE = re.compile(
    r"(?:now(?:\+[0-9]+[a-z]*)?|[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}(?::[0-9]{2})?)?"
    r"|[0-9]{1,2}:[0-9]{2}(?::[0-9]{2})?|midnight|noon|teatime|today|tomorrow)\Z"
)


def check_begin(field_name: str, value: str) -> None:
    """``--begin``/``--deadline``: sbatch's time forms."""
    if not BEGIN_RE.match(value):
        raise InvalidArgument(field_name, f"bad begin time {value[:80]!r}: use now+N[unit] or YYYY-MM-DD[THH:MM[:SS]]")


_SHARING = {
    "": Sharing.EXCLUSIVE,
    "exclusive": Sharing.EXCLUSIVE,
    "user": Sharing.USER,
    "mcs": Sharing.MCS,
    "oversubscribe": Sharing.OVERSUBSCRIBE,
}


def sharing(m: Merged) -> Sharing | None:
    """``--exclusive[=user|mcs]`` and ``--oversubscribe``: the one given last wins, as in sbatch."""
    last = m.last_of("exclusive", "oversubscribe")
    if last is None:
        return None
    if last == "oversubscribe":
        return Sharing.OVERSUBSCRIBE
    d = m.values["exclusive"]
    asked = _SHARING.get((d.value or "").lower())
    if asked is None:
        raise InvalidArgument(d.field, f"{d.where}: --exclusive takes no value, user or mcs")
    return asked


_MAX_SBATCH_OPTIONS = 256
_MAX_OPTION = 4096
_HINTS = ("compute_bound", "memory_bound", "multithread", "nomultithread")


def sbatch_options(spec: JobSpec) -> list[Directive]:
    """spec.sbatch_options read like directive lines (same getopt rules, same allowlist)."""
    if len(spec.sbatch_options) > _MAX_SBATCH_OPTIONS:
        raise InvalidArgument("spec.sbatch_options", f"more than {_MAX_SBATCH_OPTIONS} options")
    for i, word in enumerate(spec.sbatch_options):
        if len(word) > _MAX_OPTION or any(ord(c) < 32 or ord(c) == 127 for c in word):
            raise InvalidArgument(
                f"spec.sbatch_options[{i}]", f"longer than {_MAX_OPTION} characters or contains control characters"
            )
    try:
        return parse_options(list(spec.sbatch_options))
    except ValueError as exc:
        raise InvalidArgument("spec.sbatch_options", str(exc)) from None


def layout(m: Merged, gpu_type: str) -> dict[str, Any]:
    """The task layout, per-GPU amounts and scheduling options beyond the basic resources."""
    typed = m.read("gpus-per-task", typed_upto(sbatch_values.gpus, MAX_GPUS))
    per_socket = m.read("gpus-per-socket", typed_upto(sbatch_values.gpus, MAX_GPUS))
    for option, asked in (("gpus-per-task", typed), ("gpus-per-socket", per_socket)):
        if asked is not None and asked[0] and gpu_type and asked[0] != gpu_type:
            d = m.values[option]
            raise InvalidArgument(d.field, f"{d.where}: GPU type {asked[0]!r} differs from {gpu_type!r}")
        gpu_type = gpu_type or (asked[0] if asked else "")
    sockets, cores, threads = m.read("extra-node-info", sbatch_values.extra_node_info) or (None, None, None)
    wait_all = m.read("wait-all-nodes", lambda t: sbatch_values.choice(t, ("0", "1"), "--wait-all-nodes"))
    kill = m.read("kill-on-invalid-dep", lambda t: sbatch_values.choice(t, ("yes", "no"), "--kill-on-invalid-dep"))
    return {
        "gpu_type": gpu_type,
        "gpus_per_task": typed[1] if typed else None,
        "cpus_per_gpu": m.read("cpus-per-gpu", upto(sbatch_values.count, MAX_CPUS)),
        "memory_mb_per_gpu": m.read("mem-per-gpu", upto(sbatch_values.megabytes, MAX_MEMORY_MB)),
        "tasks_per_gpu": m.read("ntasks-per-gpu", upto(sbatch_values.count, MAX_TASKS)),
        "tasks_per_core": m.read("ntasks-per-core", upto(sbatch_values.count, MAX_TASKS)),
        "gpu_bind": m.read("gpu-bind", sbatch_values.gpu_bind) or "",
        "gres_flags": m.read(
            "gres-flags", lambda t: sbatch_values.choice(t, ("enforce-binding", "disable-binding"), "--gres-flags")
        )
        or "",
        "hint": m.read("hint", lambda t: sbatch_values.choice(t, _HINTS, "--hint")) or "",
        "distribution": m.read("distribution", sbatch_values.distribution) or "",
        "sockets_per_node": m.read("sockets-per-node", upto(sbatch_values.count, MAX_CPUS)) or sockets,
        "cores_per_socket": m.read("cores-per-socket", upto(sbatch_values.count, MAX_CPUS)) or cores,
        "threads_per_core": m.read("threads-per-core", upto(sbatch_values.count, MAX_CPUS)) or threads,
        "min_cpus_per_node": m.read("mincpus", upto(sbatch_values.count, MAX_CPUS)),
        "contiguous": m.flag("contiguous"),
        "spread_job": m.flag("spread-job"),
        "kill_on_invalid_dep": None if kill is None else kill == "yes",
        "deadline": m.text("deadline", "", "spec.sbatch_options", check_begin),
        "time_min_seconds": m.read("time-min", sbatch_values.finite_time),
        "wckey": m.read("wckey", sbatch_values.name) or "",
        "comment": m.read("comment", sbatch_values.comment) or "",
        "tmp_mb": m.read("tmp", upto(sbatch_values.megabytes, MAX_MEMORY_MB)),
        "tasks_per_socket": m.read("ntasks-per-socket", upto(sbatch_values.count, MAX_TASKS)),
        "gpus_per_socket": per_socket[1] if per_socket else None,
        "delay_boot_seconds": m.read("delay-boot", sbatch_values.finite_time),
        "overcommit": m.flag("overcommit"),
        "no_kill": bool(m.read_optional("no-kill", sbatch_values.no_kill)),
        "use_min_nodes": m.flag("use-min-nodes"),
        "wait_all_nodes": None if wait_all is None else wait_all == "1",
        "mem_bind": m.read("mem-bind", sbatch_values.mem_bind) or "",
        "acctg_freq": m.read("acctg-freq", sbatch_values.acctg_freq) or "",
        "licenses": m.read("licenses", sbatch_values.licenses) or "",
        "batch_features": m.read("batch", sbatch_values.features) or "",
    }
