"""sbatch's option table (sbatch 22.05's getopt table, the release the side-by-side test runs on)
and getopt's rules.

Options are read like getopt_long reads them: ``--name=v``, ``--name v``, ``-xv``, ``-x v``, short
options clustered (``-Hv``) and any unambiguous prefix of a long option (``--par`` is ambiguous:
``--parsable``/``--partition``). Every option is in :data:`ACCEPTED` (each backend renders it with
sbatch's meaning), :data:`ANSWER_ONLY` (it changes only what sbatch prints) or :data:`REFUSED` with
the reason; a test pins that they cover the table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Arg(enum.Enum):
    NONE = 0
    REQUIRED = 1
    OPTIONAL = 2  # only as --name=value or -xVALUE, as getopt


_REQUIRED = """account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters comment constraint
container core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot dependency
distribution error exclude export export-file extra-node-info gid gpu-bind gpu-freq gpus gpus-per-node
gpus-per-socket gpus-per-task gres gres-flags hint input job-name kill-on-invalid-dep licenses mail-type mail-user
mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus network nodefile nodelist nodes ntasks ntasks-per-core
ntasks-per-gpu ntasks-per-node ntasks-per-socket open-mode output partition power priority profile propagate qos
reservation signal sockets-per-node switches thread-spec threads-per-core time time-min tmp uid
wait-all-nodes wckey wrap"""
_FLAGS = """contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot requeue spread-job
test-only usage use-min-nodes verbose version wait"""
SBATCH_LONG: dict[str, Arg] = {
    **dict.fromkeys(_REQUIRED.split(), Arg.REQUIRED),
    **dict.fromkeys(_FLAGS.split(), Arg.NONE),
    **dict.fromkeys(["exclusive", "get-user-env", "nice", "no-kill"], Arg.OPTIONAL),
}
SBATCH_SHORT: dict[str, str] = {
    "a": "array",
    "A": "account",
    "b": "begin",
    "B": "extra-node-info",
    "c": "cpus-per-task",
    "C": "constraint",
    "d": "dependency",
    "D": "chdir",
    "e": "error",
    "F": "nodefile",
    "G": "gpus",
    "h": "help",
    "H": "hold",
    "i": "input",
    "J": "job-name",
    "k": "no-kill",
    "L": "licenses",
    "m": "distribution",
    "M": "clusters",
    "n": "ntasks",
    "N": "nodes",
    "o": "output",
    "O": "overcommit",
    "p": "partition",
    "q": "qos",
    "Q": "quiet",
    "s": "oversubscribe",
    "S": "core-spec",
    "t": "time",
    "v": "verbose",
    "V": "version",
    "w": "nodelist",
    "W": "wait",
    "x": "exclude",
}

# Options a job may ask for: each is a field of clusterd's job request, rendered by every backend.
ACCEPTED = frozenset(
    [
        "account",
        "acctg-freq",
        "array",
        "batch",
        "begin",
        "chdir",
        "comment",
        "constraint",
        "contiguous",
        "cores-per-socket",
        "cpus-per-gpu",
        "cpus-per-task",
        "deadline",
        "delay-boot",
        "dependency",
        "distribution",
        "error",
        "exclude",
        "exclusive",
        "export",
        "extra-node-info",
        "gpu-bind",
        "gpus",
        "gpus-per-node",
        "gpus-per-socket",
        "gpus-per-task",
        "gres",
        "gres-flags",
        "hint",
        "hold",
        "ignore-pbs",
        "input",
        "job-name",
        "kill-on-invalid-dep",
        "licenses",
        "mail-type",
        "mail-user",
        "mem",
        "mem-bind",
        "mem-per-cpu",
        "mem-per-gpu",
        "mincpus",
        "nice",
        "no-kill",
        "no-requeue",
        "nodelist",
        "nodes",
        "ntasks",
        "ntasks-per-core",
        "ntasks-per-gpu",
        "ntasks-per-node",
        "ntasks-per-socket",
        "open-mode",
        "output",
        "overcommit",
        "oversubscribe",
        "partition",
        "qos",
        "requeue",
        "reservation",
        "signal",
        "sockets-per-node",
        "spread-job",
        "switches",
        "threads-per-core",
        "time",
        "time-min",
        "tmp",
        "use-min-nodes",
        "wait-all-nodes",
        "wckey",
    ]
)
# Why each other option is refused: the privilege or host resource it would reach, or what is missing.
REFUSED: dict[str, str] = {
    "bb": "burst buffers stage data with the burst buffer plugin's rights",
    "bbf": "it makes the submitting side read a file",
    "nodefile": "it makes the submitting side read a file (use --nodelist)",
    "export-file": "it makes the submitting side read a file (use --export)",
    "uid": "jobs run as their submitter (a privilege of root and SlurmUser)",
    "gid": "jobs run with their submitter's groups (a privilege of root and SlurmUser)",
    "get-user-env": "a privilege of root: it runs a login shell as the user on the submitting host",
    "priority": "setting a job's priority is a privilege of Slurm operators",
    "reboot": "rebooting nodes is a privilege of Slurm operators",
    "power": "node power settings are a privilege of Slurm operators",
    "mcs-label": "MCS labels grant access by group: set by the site's MCS plugin",
    "container": "OCI containers are started by slurmd with the node's container runtime",
    "wait": "it holds a submit worker until the job ends (use clusterctl submit --wait)",
    "wrap": "the script is the job (clusterctl submit --wrap builds it)",
    "test-only": "nothing would be submitted",
    "help": "an answer of the client, not a job option",
    "usage": "an answer of the client, not a job option",
    "version": "an answer of the client, not a job option",
    "clusters": "clusterd submits to the one cluster it fronts",
    "cluster-constraint": "clusterd submits to the one cluster it fronts",
    "core-spec": "reserving cores from the node's system use needs AllowSpecResourcesUsage on the nodes",
    "thread-spec": "reserving threads from the node's system use needs AllowSpecResourcesUsage on the nodes",
    "cpu-freq": "CPU frequency governors are host settings of the nodes",
    "gpu-freq": "GPU clocks are host settings of the nodes",
    "network": "network (switch window) resources are configured by the site's switch plugin",
    "profile": "profiling writes HDF5 files with slurmd's rights on the nodes",
    "propagate": "it carries the submitting process's resource limits, which are clusterd's, not the caller's",
}


# Options that change only what sbatch prints: taken (sbatch takes them in a script too), with
# nothing to render; the CLI has its own --parsable and -v.
ANSWER_ONLY = frozenset(["parsable", "quiet", "verbose"])


class OptionError(ValueError):
    """A word that is not an sbatch option sbatch would take as written (unknown, ambiguous, no value).

    ``index``: the word's position in the words read (which line it came from, for a script).
    """

    def __init__(self, message: str, index: int = 0) -> None:
        super().__init__(message)
        self.index = index


class RefusedOption(OptionError):
    """An sbatch option clusterd refuses: ``option`` (its long name), as ``written``, and why."""

    def __init__(self, option: str, written: str, reason: str, index: int = 0) -> None:
        super().__init__(f"--{option} is not allowed ({reason})", index)
        self.option = option
        self.written = written
        self.reason = reason


@dataclass(frozen=True)
class Option:
    """One option as given, resolved to sbatch's full long name."""

    name: str  # long name, e.g. "partition"
    value: str | None  # None for a flag given without a value
    written: str  # as written ("-p", "--par"), for messages
    index: int = field(default=0, compare=False)  # the position of the word it starts at


def resolve_long(name: str) -> str:
    """getopt_long's lookup: an exact name, else the one option ``name`` abbreviates."""
    if name in SBATCH_LONG:
        return name
    matches = [o for o in SBATCH_LONG if o.startswith(name)] if name else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise OptionError(f"--{name} is ambiguous (--{', --'.join(sorted(matches))})")
    raise OptionError(f"--{name} is not an sbatch option")


def parse_words(words: list[str]) -> list[Option]:
    """Every option in ``words``, with getopt's rules. A word that is not an option is an error, as
    sbatch says of a directive line ("Invalid directive found in batch script")."""
    out: list[Option] = []
    i = 0
    while i < len(words):
        word = words[i]
        at = i
        i += 1
        if word == "--":  # getopt's end of options: a word after it is not an option
            if i < len(words):
                raise OptionError(f"{words[i][:40]!r} is not an option (sbatch: invalid directive)", i)
            break
        if word.startswith("--") and len(word) > 2:
            key, eq, value = word[2:].partition("=")
            try:
                option = resolve_long(key)
            except OptionError as exc:
                raise OptionError(str(exc), at) from None
            kind = SBATCH_LONG[option]
            val: str | None = value if eq else None
            if kind is Arg.NONE and eq:
                raise OptionError(f"--{option} takes no value", at)
            if kind is Arg.REQUIRED and not eq:
                if i >= len(words):
                    raise OptionError(f"--{option} needs a value", at)
                val = words[i]
                i += 1
            out.append(Option(option, val, f"--{key}", at))
        elif word.startswith("-") and len(word) > 1:
            j = 1  # a cluster of short options: -Hv, -N2, -p debug (getopt stops at one that takes a value)
            while j < len(word):
                letter = word[j]
                long_name = SBATCH_SHORT.get(letter)
                if long_name is None:
                    raise OptionError(f"-{letter} is not an sbatch option", at)
                kind = SBATCH_LONG[long_name]
                rest = word[j + 1 :]
                if kind is Arg.NONE:
                    out.append(Option(long_name, None, f"-{letter}", at))
                    j += 1
                    continue
                if rest:
                    val = rest
                elif kind is Arg.REQUIRED:
                    if i >= len(words):
                        raise OptionError(f"-{letter} needs a value", at)
                    val = words[i]
                    i += 1
                else:
                    val = None
                out.append(Option(long_name, val, f"-{letter}", at))
                break
        else:
            raise OptionError(f"{word[:40]!r} is not an option (sbatch: invalid directive)", at)
    return out


def refusal(option: str) -> str | None:
    """Why ``option`` (a long name) is refused, or None when it is accepted."""
    return None if option in ACCEPTED or option in ANSWER_ONLY else REFUSED[option]


def allowed_options(words: list[str]) -> list[Option]:
    """The options ``words`` give (getopt's rules), each one clusterd takes: the one reader of sbatch
    option words, for the CLI's ``SBATCH_*`` variables and clusterd's directives and forwarded options.

    Raises:
        RefusedOption: an option of the refused table; its message ("--uid is not allowed (why)")
            is the service's wording, the CLI words its own from the fields.
        OptionError: a word sbatch would not take as written.
    """
    options = parse_words(words)
    for o in options:
        why = refusal(o.name)
        if why is not None:
            raise RefusedOption(o.name, o.written, why, o.index)
    return options
