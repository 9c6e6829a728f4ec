"""A batch script's directive header, read with sbatch's own rules, and neutralised for Slurm.

sbatch reads the comment block at the top of a script (up to the first line that is neither blank
nor a comment): ``#SBATCH`` lines as options, ``#PBS``/``#BSUB`` lines unless ``--ignore-pbs``, and
it complains about ``#SLURM``. Options are parsed like getopt_long: ``--name=v``, ``--name v``,
``-xv``, ``-x v``, and any unambiguous prefix of a long option (``--par`` is ambiguous to sbatch:
``--parsable``/``--partition``). Every option either maps to a field the service knows
(:data:`ALLOWED`) or is refused with the script line named. The script handed to Slurm has its
directive lines turned into plain comments (same line count), so Slurm applies only the options
rendered from the validated request: the allowlist holds by construction.
"""

from __future__ import annotations

import enum
import shlex
from dataclasses import dataclass


class Arg(enum.Enum):
    NONE = 0
    REQUIRED = 1
    OPTIONAL = 2  # only as --name=value or -xVALUE, as getopt


# Every long option sbatch 22.05 knows (its getopt table), with whether it takes a value: what
# abbreviations are resolved against, so that a prefix means here what it means to sbatch.
SBATCH_LONG: dict[str, Arg] = {
    **dict.fromkeys(
        [
            "account",
            "acctg-freq",
            "array",
            "batch",
            "bb",
            "bbf",
            "begin",
            "chdir",
            "cluster-constraint",
            "clusters",
            "comment",
            "constraint",
            "container",
            "core-spec",
            "cores-per-socket",
            "cpu-freq",
            "cpus-per-gpu",
            "cpus-per-task",
            "deadline",
            "delay-boot",
            "dependency",
            "distribution",
            "error",
            "exclude",
            "export",
            "export-file",
            "extra-node-info",
            "gid",
            "gpu-bind",
            "gpu-freq",
            "gpus",
            "gpus-per-node",
            "gpus-per-socket",
            "gpus-per-task",
            "gres",
            "gres-flags",
            "hint",
            "input",
            "job-name",
            "kill-on-invalid-dep",
            "licenses",
            "mail-type",
            "mail-user",
            "mcs-label",
            "mem",
            "mem-bind",
            "mem-per-cpu",
            "mem-per-gpu",
            "mincpus",
            "network",
            "nodefile",
            "nodelist",
            "nodes",
            "ntasks",
            "ntasks-per-core",
            "ntasks-per-gpu",
            "ntasks-per-node",
            "ntasks-per-socket",
            "open-mode",
            "output",
            "partition",
            "power",
            "priority",
            "profile",
            "propagate",
            "qos",
            "reservation",
            "signal",
            "sockets-per-node",
            "switches",
            "thread-spec",
            "threads-per-core",
            "time",
            "time-min",
            "tmp",
            "tres-per-task",
            "uid",
            "wait-all-nodes",
            "wckey",
            "wrap",
        ],
        Arg.REQUIRED,
    ),
    **dict.fromkeys(
        [
            "contiguous",
            "help",
            "hold",
            "ignore-pbs",
            "no-requeue",
            "overcommit",
            "oversubscribe",
            "parsable",
            "quiet",
            "reboot",
            "requeue",
            "spread-job",
            "test-only",
            "usage",
            "use-min-nodes",
            "verbose",
            "version",
            "wait",
        ],
        Arg.NONE,
    ),
    **dict.fromkeys(["exclusive", "get-user-env", "nice", "no-kill"], Arg.OPTIONAL),
}
SBATCH_SHORT: dict[str, str] = {
    "a": "array", "A": "account", "b": "begin", "c": "cpus-per-task", "C": "constraint", "d": "dependency",
    "D": "chdir", "e": "error", "F": "nodefile", "G": "gpus", "h": "help", "H": "hold", "i": "input",
    "J": "job-name", "k": "no-kill", "L": "licenses", "m": "distribution", "M": "clusters", "n": "ntasks",
    "N": "nodes", "o": "output", "O": "overcommit", "p": "partition", "q": "qos", "Q": "quiet",
    "s": "oversubscribe", "S": "core-spec", "t": "time", "v": "verbose", "V": "version", "w": "nodelist",
    "W": "wait", "x": "exclude",
}  # fmt: skip

# The options a script may set: each is a field of the job request (clusterd.slurm.request).
ALLOWED = frozenset(
    [
        "account",
        "array",
        "begin",
        "chdir",
        "constraint",
        "cpus-per-task",
        "dependency",
        "error",
        "exclude",
        "exclusive",
        "export",
        "gpus",
        "gpus-per-node",
        "gres",
        "hold",
        "ignore-pbs",
        "job-name",
        "mail-type",
        "mail-user",
        "mem",
        "mem-per-cpu",
        "nice",
        "nodelist",
        "nodes",
        "ntasks",
        "ntasks-per-node",
        "output",
        "partition",
        "qos",
        "requeue",
        "reservation",
        "signal",
        "switches",
        "time",
    ]
)
# Why the most tempting refused options are refused (the rest: "is not supported by clusterd").
_WHY = {
    "bb": "burst buffers are not available through clusterd",
    "bbf": "it makes sbatch read a file",
    "nodefile": "it makes sbatch read a file (use --nodelist)",
    "export-file": "it makes sbatch read a file (use --export)",
    "uid": "jobs run as their submitter",
    "gid": "jobs run with their submitter's groups",
    "get-user-env": "it is a root-only option",
    "priority": "it is a privilege of Slurm operators",
    "reboot": "it is a privilege of Slurm operators",
    "wait": "it holds a submit worker until the job ends (use clusterctl submit --wait)",
    "wrap": "the script is the job",
    "parsable": "clusterd reads sbatch's answer itself",
    "comment": "clusterd uses the job's comment to track it",
    "no-requeue": "the restart policy decides requeues",
    "test-only": "nothing would be submitted",
}
_FAMILIES = ("#SBATCH", "#SLURM", "#PBS", "#BSUB")
NEUTRAL_PREFIX = "#clusterd:"  # what a directive line starts with once neutralised


class DirectiveError(ValueError):
    """A directive sbatch would apply that clusterd cannot: the message names the script line."""

    def __init__(self, lineno: int, message: str) -> None:
        super().__init__(f"script line {lineno}: {message}")
        self.lineno = lineno


@dataclass(frozen=True)
class Directive:
    """One option from the header, resolved to sbatch's full long name."""

    lineno: int
    option: str  # long name, e.g. "partition"
    value: str | None  # None for a flag given without a value
    text: str  # as written, for error messages ("#SBATCH --par=debug")


def header_end(lines: list[str]) -> int:
    """Index of the first line sbatch does not read as header: neither blank nor a comment."""
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return i
    return len(lines)


def _family(line: str) -> str | None:
    """The directive family a header line belongs to (sbatch compares the line start, case-sensitive)."""
    return next((f for f in _FAMILIES if line.startswith(f)), None)


def resolve_long(name: str) -> str:
    """getopt_long's lookup: an exact name, else the one option ``name`` abbreviates.

    Raises ValueError when ``name`` is unknown or ambiguous.
    """
    if name in SBATCH_LONG:
        return name
    matches = [o for o in SBATCH_LONG if o.startswith(name)] if name else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ValueError(f"--{name} is ambiguous (--{', --'.join(sorted(matches))})")
    raise ValueError(f"--{name} is not an sbatch option")


def _tokens(lineno: int, body: str) -> list[str]:
    """The words of a directive line, quotes honoured; a `` #`` starts a trailing comment."""
    try:
        lexer = shlex.shlex(body, posix=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        words = list(lexer)
    except ValueError as exc:
        raise DirectiveError(lineno, f"cannot read the directive: {exc}") from exc
    return words[: next((i for i, w in enumerate(words) if w.startswith("#")), len(words))]


def _parse_line(lineno: int, text: str, body: str) -> list[Directive]:
    words = _tokens(lineno, body)
    out: list[Directive] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            try:
                option = resolve_long(name)
            except ValueError as exc:
                raise DirectiveError(lineno, f"{text}: {exc}") from None
            kind = SBATCH_LONG[option]
            val: str | None = value if eq else None
            if kind is Arg.NONE and eq:
                raise DirectiveError(lineno, f"{text}: --{option} takes no value")
            if kind is Arg.REQUIRED and not eq:
                if i >= len(words):
                    raise DirectiveError(lineno, f"{text}: --{option} needs a value")
                val = words[i]
                i += 1
        elif word.startswith("-") and len(word) > 1:
            # A cluster of short options: -Hv, -N2, -p debug (getopt stops at one that takes a value).
            j = 1
            while j < len(word):
                letter = word[j]
                option_name = SBATCH_SHORT.get(letter)
                if option_name is None:
                    raise DirectiveError(lineno, f"{text}: -{letter} is not an sbatch option")
                kind = SBATCH_LONG[option_name]
                rest = word[j + 1 :]
                if kind is Arg.NONE:
                    out.append(Directive(lineno, option_name, None, text))
                    j += 1
                    continue
                if rest:
                    val = rest
                elif kind is Arg.REQUIRED:
                    if i >= len(words):
                        raise DirectiveError(lineno, f"{text}: -{letter} needs a value")
                    val = words[i]
                    i += 1
                else:
                    val = None
                out.append(Directive(lineno, option_name, val, text))
                break
            continue
        else:
            # sbatch stops reading a directive line at its first non-option word.
            break
        out.append(Directive(lineno, option, val, text))
    return out


def parse_directives(script: str) -> list[Directive]:
    """Every option of the script's header in order (later ones win), each checked against ALLOWED.

    Raises DirectiveError naming the line for a refused family or option.
    """
    lines = script.split("\n")
    out: list[Directive] = []
    for index in range(header_end(lines)):
        line = lines[index].rstrip("\r")
        lineno = index + 1
        family = _family(line)
        if family is None:
            continue
        body = line[len(family) :]
        if body and not body[0].isspace():
            continue  # "#SBATCHX": a comment to sbatch too
        if family != "#SBATCH":
            raise DirectiveError(lineno, f"{family} directives are not supported: write the line as #SBATCH")
        text = line.strip()
        for directive in _parse_line(lineno, text, body):
            if directive.option not in ALLOWED:
                why = _WHY.get(directive.option, "it is not supported by clusterd")
                raise DirectiveError(lineno, f"{text}: --{directive.option} is not allowed ({why})")
            out.append(directive)
    return out


def neutralise(script: str) -> str:
    """The script with every directive line of its header made a plain comment, line numbers kept.

    Slurm then applies only the options rendered from the request.
    """
    lines = script.split("\n")
    for index in range(header_end(lines)):
        if _family(lines[index]) is not None:
            lines[index] = NEUTRAL_PREFIX + lines[index][1:]
    return "\n".join(lines)
