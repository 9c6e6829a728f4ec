"""docs/sbatch-options.md, generated from the option table and the backends' renderers.

Run ``python -m clusterd.jobs.option_docs > docs/sbatch-options.md``; a test fails when the file
and this output differ. What each backend does with an option is found by rendering a request that
asks for it, so the page cannot claim more than the code does.
"""

from __future__ import annotations

from collections.abc import Callable

from clusterctl.sbatch import wrappers
from clusterctl.sbatch.options import ACCEPTED, ANSWER_ONLY, SBATCH_LONG, SBATCH_SHORT, Arg, refusal
from clusterd.config import LimitsConfig
from clusterd.jobs.validate import validate_spec
from clusterd.model.spec import JobSpec
from clusterd.slurm import pyslurm_backend, restd_submit, restd_versions
from clusterd.slurm.request import JobRequest
from clusterd.slurm.restd_submit import Unexpressible
from clusterd.slurm.types import ClusterFacts

# A value each accepted option is rendered with (flags: None).
SAMPLES: dict[str, str | None] = {
    "account": "ml",
    "array": "0-7%2",
    "begin": "now+60",
    "chdir": "/tmp",
    "constraint": "a100",
    "contiguous": None,
    "cores-per-socket": "2",
    "cpus-per-gpu": "4",
    "cpus-per-task": "2",
    "deadline": "now+1hour",
    "dependency": "afterok:1",
    "distribution": "cyclic",
    "error": "err.log",
    "exclude": "node1",
    "exclusive": None,
    "export": "ALL",
    "extra-node-info": "1:2:1",
    "gpu-bind": "closest",
    "gpus": "2",
    "gpus-per-node": "2",
    "gpus-per-task": "1",
    "gres": "gpu:2",
    "gres-flags": "enforce-binding",
    "hint": "nomultithread",
    "hold": None,
    "ignore-pbs": None,
    "job-name": "x",
    "kill-on-invalid-dep": "yes",
    "mail-type": "END",
    "mail-user": "alice",
    "mem": "1G",
    "mem-per-cpu": "256",
    "mem-per-gpu": "1G",
    "mincpus": "2",
    "nice": "10",
    "no-requeue": None,
    "nodelist": "node1",
    "nodes": "1",
    "ntasks": "2",
    "ntasks-per-core": "1",
    "ntasks-per-gpu": "1",
    "ntasks-per-node": "2",
    "open-mode": "truncate",
    "output": "out.log",
    "oversubscribe": None,
    "partition": "debug",
    "qos": "normal",
    "requeue": None,
    "reservation": "maint",
    "signal": "B:USR1@60",
    "sockets-per-node": "1",
    "spread-job": None,
    "switches": "1@5",
    "threads-per-core": "1",
    "time": "10",
    "time-min": "5",
    "wckey": "proj",
    "tmp": "1G",
    "ntasks-per-socket": "1",
    "gpus-per-socket": "1",
    "delay-boot": "10",
    "overcommit": None,
    "no-kill": None,
    "use-min-nodes": None,
    "wait-all-nodes": "1",
    "mem-bind": "local",
    "acctg-freq": "task=30",
    "licenses": "fluent:2",
    "batch": "a100",
    "input": "in.txt",
    "comment": "sweep 7",
}
_FACTS = ClusterFacts(frozenset(), frozenset(), "debug")


def _request(option: str) -> JobRequest:
    value = SAMPLES[option]
    word = f"--{option}" if value is None else f"--{option}={value}"
    spec = JobSpec(script="#!/bin/bash\ntrue\n", sbatch_options=(word,), submit_directory="/tmp")
    return validate_spec(spec, _FACTS, LimitsConfig())


def _how(render: Callable[[JobRequest], object], req: JobRequest) -> str:
    try:
        render(req)
    except Unexpressible:
        return "by sbatch"
    return "yes"


_BACKENDS: tuple[tuple[str, Callable[[JobRequest], object]], ...] = (
    ("slurmrestd v0.0.38 (22.05)", lambda r: restd_submit.job_description(r, {})),
    ("slurmrestd v0.0.40-45 (24.11, 26.05)", lambda r: restd_versions.api_for("v0.0.45").submit_body(r, {}, now=0.0)),
    ("pyslurm", pyslurm_backend.submit_attributes),
)


def _wrapper_option(letter: str, long_name: str) -> str:
    return f"`-{letter}`" + (f", `--{long_name}`" if long_name else "")


def _wrapper_tables() -> list[str]:
    """The #PBS and #BSUB translations, from the tables the translation reads."""
    lines = [
        "",
        "## #PBS and #BSUB lines",
        "",
        "Translated into sbatch options as sbatch translates them, then read like any other option:",
        "they win over `#SBATCH` lines, lose to `SBATCH_*` variables and the command line, and",
        "`--ignore-pbs` (anywhere) skips them. A script with any `#BSUB` line has its `#BSUB` lines read,",
        "else its `#PBS` lines; they are looked for past the header too, up to the 101st line that",
        "does not start with `#`, and all of a family's words are read as one command line.",
        "An option with no translation is refused naming the line.",
        "",
        "### #PBS",
        "",
        "| option | sbatch |",
        "|---|---|",
    ]
    pbs = {**wrappers.PBS_OPTIONS, **{letter: ("", Arg.REQUIRED) for letter in wrappers.PBS_NEWER}}
    for letter in sorted(pbs, key=lambda c: (c.lower(), c)):
        if letter in wrappers.PBS_IGNORED:
            what = "ignored, as by sbatch"
        elif letter in wrappers.PBS_NOTES:
            what = wrappers.PBS_NOTES[letter]
        else:
            what = f"`--{wrappers.PBS_DIRECT[letter]}`"
        if letter in wrappers.PBS_NEWER:
            what += " (Slurm 23.02 on; 22.05's sbatch refuses it)"
        lines.append(f"| {_wrapper_option(letter, pbs[letter][0])} | {what} |")
    lines += ["", "`-l` resource list keys (others, and unknown text, are skipped as by sbatch):", ""]
    lines += ["| key | sbatch |", "|---|---|"]
    keys = {key: f"`--{option}`" for key, _folded, option, _stops in wrappers.RESOURCES if option}
    for key, note in sorted({**keys, **wrappers.RESOURCE_NOTES}.items()):
        lines.append(f"| `{key}` | {note} |")
    skipped = sorted(key for key, _folded, option, _stops in wrappers.RESOURCES if option is None)
    lines += [
        "",
        "Ignored keys: " + ", ".join(f"`{key}`" for key in skipped) + ". With `select=`, `ncpus=` and `mpiprocs=`",
        "all given, ncpus over mpiprocs (when above mpiprocs) sets `--cpus-per-task`; a size's trailing B",
        "(`2gb`) is dropped.",
    ]
    lines += ["", "### #BSUB", "", "| option | sbatch |", "|---|---|"]
    for letter in sorted(wrappers.BSUB_OPTIONS, key=lambda c: (c.lower(), c)):
        what = wrappers.BSUB_NOTES.get(letter) or f"`--{wrappers.BSUB_DIRECT[letter]}`"
        lines.append(f"| {_wrapper_option(letter, wrappers.BSUB_OPTIONS[letter][0])} | {what} |")
    lines += ["", "`-cwd` in an option's place is read as `-c`, as by sbatch."]
    return lines


def render() -> str:
    short = {long: letter for letter, long in SBATCH_SHORT.items()}
    lines = [
        "# sbatch options",
        "",
        "<!-- generated by `python -m clusterd.jobs.option_docs`; a test fails when this file differs -->",
        "",
        "Every option of sbatch 22.05's table, as `clusterctl submit` flags, `#SBATCH` lines and `SBATCH_*`",
        "variables take it (one parser for all three). An accepted option is rendered with sbatch's meaning",
        "by every backend: the commands backend runs sbatch as the caller; where a slurmrestd API version",
        'or pyslurm cannot carry an option as sbatch does ("by sbatch"), that request is submitted by',
        "sbatch, as the caller, instead.",
        "A refused option is refused with the script line (or flag, or variable) named and the reason below.",
        "Precedence is sbatch's: the command line, then `SBATCH_*` variables, then `#SBATCH` lines.",
        "The side-by-side test (`tests/integration/test_sbatch_parity.py`) compares `scontrol show job` of",
        "sbatch's and clusterctl's held jobs on 22.05; the v0.0.40-45 bodies are built from Slurm's parser",
        "tables and are not exercised against a server here. Per value: `--export=NONE` (or a list) and",
        "`--mail-type` go by sbatch on v0.0.40-45, `--signal=B:...` by sbatch on v0.0.38, and `--mem=0`",
        "(all of each node's memory) by sbatch on every slurmrestd version and pyslurm.",
        "",
        "## Accepted",
        "",
        "| option | " + " | ".join(name for name, _ in _BACKENDS) + " |",
        "|---|" + "---|" * len(_BACKENDS),
    ]
    for option in sorted(ACCEPTED):
        req = _request(option)
        flag = f"`-{short[option]}`, " if option in short else ""
        value = "" if SBATCH_LONG[option] is Arg.NONE else ("[=...]" if SBATCH_LONG[option] is Arg.OPTIONAL else "=...")
        how = " | ".join(_how(fn, req) for _name, fn in _BACKENDS)
        lines.append(f"| {flag}`--{option}{value}` | {how} |")
    lines += [
        "",
        "## Taken, with nothing to send",
        "",
        "They change only what sbatch prints, so a script that has them works unchanged; on the command",
        "line `clusterctl submit` has its own `--parsable` and `-v`.",
        "",
    ]
    lines += [f"- `--{option}`" for option in sorted(ANSWER_ONLY)]
    lines += ["", "## Refused", "", "| option | why |", "|---|---|"]
    for option in sorted(set(SBATCH_LONG) - ACCEPTED - ANSWER_ONLY):
        flag = f"`-{short[option]}`, " if option in short else ""
        lines.append(f"| {flag}`--{option}` | {refusal(option)} |")
    lines += [
        "",
        "Options newer releases added to sbatch (24.11, 26.05) are not in the table yet: they are refused",
        "as unknown options.",
        *_wrapper_tables(),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
