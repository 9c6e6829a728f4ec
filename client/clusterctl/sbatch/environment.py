"""sbatch's input environment variables (``SBATCH_PARTITION=debug``): the options they stand for.

sbatch applies them over the script's ``#SBATCH`` lines and under its command line; the CLI turns
them into options in sbatch's syntax, sent ahead of its command line's (later options win), and the
service applies all of them over the script's lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from clusterctl.sbatch.options import SBATCH_LONG, Arg

# sbatch 22.05's table (man sbatch, INPUT ENVIRONMENT VARIABLES), variable -> long option.
INPUT_VARIABLES: dict[str, str] = {
    "SBATCH_ACCOUNT": "account",
    "SBATCH_ACCTG_FREQ": "acctg-freq",
    "SBATCH_ARRAY_INX": "array",
    "SBATCH_BATCH": "batch",
    "SBATCH_CLUSTERS": "clusters",
    "SBATCH_CLUSTER_CONSTRAINT": "cluster-constraint",
    "SBATCH_CONSTRAINT": "constraint",
    "SBATCH_CONTAINER": "container",
    "SBATCH_CORE_SPEC": "core-spec",
    "SBATCH_CPUS_PER_GPU": "cpus-per-gpu",
    "SBATCH_DELAY_BOOT": "delay-boot",
    "SBATCH_DISTRIBUTION": "distribution",
    "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_EXPORT": "export",
    "SBATCH_GET_USER_ENV": "get-user-env",
    "SBATCH_GPU_BIND": "gpu-bind",
    "SBATCH_GPU_FREQ": "gpu-freq",
    "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_GRES": "gres",
    "SBATCH_GRES_FLAGS": "gres-flags",
    "SBATCH_HINT": "hint",
    "SBATCH_IGNORE_PBS": "ignore-pbs",
    "SBATCH_JOB_NAME": "job-name",
    "SBATCH_MEM_BIND": "mem-bind",
    "SBATCH_MEM_PER_CPU": "mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "mem-per-gpu",
    "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_NETWORK": "network",
    "SBATCH_NO_KILL": "no-kill",
    "SBATCH_NO_REQUEUE": "no-requeue",
    "SBATCH_OPEN_MODE": "open-mode",
    "SBATCH_OVERCOMMIT": "overcommit",
    "SBATCH_PARTITION": "partition",
    "SBATCH_POWER": "power",
    "SBATCH_PROFILE": "profile",
    "SBATCH_QOS": "qos",
    "SBATCH_REQUEUE": "requeue",
    "SBATCH_RESERVATION": "reservation",
    "SBATCH_SIGNAL": "signal",
    "SBATCH_SPREAD_JOB": "spread-job",
    "SBATCH_THREAD_SPEC": "thread-spec",
    "SBATCH_TIMELIMIT": "time",
    "SBATCH_USE_MIN_NODES": "use-min-nodes",
    "SBATCH_WAIT": "wait",
    "SBATCH_WAIT_ALL_NODES": "wait-all-nodes",
    "SBATCH_WCKEY": "wckey",
}
# --switches=COUNT[@WAIT] comes from two variables.
SWITCH_COUNT, SWITCH_WAIT = "SBATCH_REQ_SWITCH", "SBATCH_WAIT4SWITCH"


def options_from_environment(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(variable, option in sbatch's syntax) for each input variable set, in the table's order.

    A flag's variable sets the flag whatever its value, as sbatch; an empty value of an option
    that needs one is skipped, as sbatch skips it. What the option means, and whether it is
    allowed, is for the parser that reads the options (the same one that reads ``#SBATCH``).
    """
    out: list[tuple[str, str]] = []
    for variable, option in INPUT_VARIABLES.items():
        value = environ.get(variable)
        if value is None:
            continue
        kind = SBATCH_LONG[option]
        if kind is Arg.NONE:
            out.append((variable, f"--{option}"))
        elif value or kind is Arg.OPTIONAL:
            out.append((variable, f"--{option}={value}" if value else f"--{option}"))
    count = environ.get(SWITCH_COUNT)
    if count:
        wait = environ.get(SWITCH_WAIT)
        out.append((SWITCH_COUNT, f"--switches={count}@{wait}" if wait else f"--switches={count}"))
    return out


# bash exports a function f (``export -f f``) as the variable ``BASH_FUNC_f%%`` holding ``() { ...}``;
# under sbatch's --export=ALL the job's bash defines it again. Only plain names are taken here.
_FUNCTION_VAR = re.compile(r"BASH_FUNC_([A-Za-z_][A-Za-z0-9_]{0,63})%%\Z")


def exported_function(name: str, value: str) -> str | None:
    """The function an exported-function variable defines (``BASH_FUNC_f%%`` -> ``f``), or None."""
    m = _FUNCTION_VAR.match(name)
    if m is None or not value.startswith("() {") or not value.rstrip().endswith("}"):
        return None
    return m.group(1)
