"""``--export``: which of the caller's variables travel with a submission, as sbatch decides it.

sbatch's default is ``--export=ALL``: the job starts with the submitting shell's environment. The
service runs sbatch for its callers and never hands a job its own environment, so the CLI sends
the caller's variables in ``spec.environment`` and the export mode in ``spec.export``:

- unset / ``ALL`` (and ``ALL,NAME[=value],...``): every variable of this shell, minus the ones
  below; ``spec.export`` stays unset for the default so a script's ``#SBATCH --export`` decides.
- ``NONE``: nothing from this shell.
- ``NAME[=value],...``: only those; a bare NAME takes its value from this shell (and is skipped,
  as sbatch skips it, when unset there); ``NAME=value`` items travel inside ``spec.export``.
- ``--env NAME=VALUE`` / ``--export-env NAME`` always reach the job: they go in
  ``spec.environment`` and, under NONE or a NAME list, their names join ``spec.export``.

Never sent: names the service reserves (``SLURM_*``, ``SBATCH_*``, ``SALLOC_*``, ``SRUN_*``,
``CLUSTERCTL_*``: the token stays here), names that are not identifiers (but for the variables
bash exports a function in, ``BASH_FUNC_f%%``, which travel as under sbatch and are defined again
in a bash job script) and values that are not UTF-8. The rest is bounded (:data:`MAX_VARS`,
:data:`MAX_VALUE_BYTES`, :data:`MAX_TOTAL_BYTES`, within the server's limits) so a huge shell
environment cannot make the request fail; what is left out is reported, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from clusterctl.cli.values import is_env_name
from clusterctl.sbatch.environment import exported_function

SKIPPED_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "CLUSTERCTL_", "BASH_FUNC_")
MAX_VARS = 256  # the server's limits.max_env_vars default
MAX_VALUE_BYTES = 32 << 10  # the server's limits.max_env_value_bytes default
MAX_TOTAL_BYTES = 64 << 10  # NAME=VALUE bytes in all: a request stays small


@dataclass(frozen=True)
class Exported:
    """What to put in the JobSpec: ``export`` (None: leave unset) and ``environment``."""

    export: str | None
    environment: dict[str, str] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)  # names over the bounds, for a warning


def parse_export(text: str) -> tuple[bool, list[str]]:
    """``--export`` value -> (whether ALL is in it, the bare NAMEs to copy from this shell).

    Raises:
        ValueError: an empty item, or a NAME that is not an identifier.
    """
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise ValueError(f"bad --export {text!r}: empty item")
    everything = False
    names: list[str] = []
    for item in items:
        if item in ("ALL", "NONE"):
            everything |= item == "ALL"
            continue
        name = item.partition("=")[0]
        if not is_env_name(name):
            raise ValueError(f"bad --export {text!r}: {name!r} is not a variable name")
        if "=" not in item:
            names.append(name)
    return everything, names


def with_names(export: str | None, names: list[str]) -> str | None:
    """``export`` extended so that ``names`` (set by --env / --export-env) reach the job too.

    Under ALL (or unset) every variable sent travels anyway; under NONE or a NAME list the
    explicit ones are added as bare NAMEs (their values are in ``spec.environment``), so
    ``--export=NONE --env LR=0.1`` gives the job LR and nothing else from this shell.
    """
    if export is None or not names or parse_export(export)[0]:
        return export
    items = [item.strip() for item in export.split(",") if item.strip() != "NONE"]
    present = {item.partition("=")[0] for item in items}
    items += [name for name in dict.fromkeys(names) if name not in present]
    return ",".join(items) or "NONE"


def export_value(text: str) -> str:
    """argparse ``type=`` for ``--export``: checks the shape and returns the text unchanged."""
    parse_export(text)
    return text


def sendable(name: str, value: str) -> bool:
    """Whether a variable of this shell may be sent at all (bounds aside): an exported bash
    function (``export -f f``: ``BASH_FUNC_f%%``) travels too, as under sbatch's --export=ALL."""
    if exported_function(name, value) is None and (not is_env_name(name) or name.startswith(SKIPPED_PREFIXES)):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:  # undecodable bytes from the OS (surrogate escapes)
        return False
    return True


def collect(export: str | None, environ: Mapping[str, str]) -> Exported:
    """The environment to send for ``export`` (None: the default, ALL) from ``environ``.

    Named variables come first, then the rest in name order, so the bounds always cut the same
    ones and never a variable the caller named.
    """
    everything, names = (True, []) if export is None else parse_export(export)
    ordered = list(dict.fromkeys(names))
    if everything:
        ordered += sorted(set(environ) - set(names))
    sent: dict[str, str] = {}
    left_out: list[str] = []
    total = 0
    for name in ordered:
        value = environ.get(name)
        if value is None or not sendable(name, value):
            continue
        size = len(name) + len(value.encode()) + 2
        if len(sent) >= MAX_VARS or len(value.encode()) > MAX_VALUE_BYTES or total + size > MAX_TOTAL_BYTES:
            left_out.append(name)
            continue
        sent[name] = value
        total += size
    return Exported(export=export, environment=sent, left_out=left_out)
