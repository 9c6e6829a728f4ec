"""``#PBS`` and ``#BSUB`` directive lines, translated into sbatch options as sbatch translates them.

sbatch reads these lines after its ``#SBATCH`` ones (so they win over them), unless ``--ignore-pbs``
is given anywhere (command line, ``SBATCH_IGNORE_PBS``, an ``#SBATCH`` line). It reads one family
only: ``#BSUB`` when the script has any ``#BSUB`` line, else ``#PBS``. Unlike ``#SBATCH`` lines these
are looked for past the header, up to the 101st line that does not start with ``#``; every word of
the family's lines is read as one command line, with the family's own option letters. An option
sbatch ignores is ignored here; one with no sbatch option clusterd takes is refused with the line
and the reason. Translations depend on what is set so far (``#PBS -v`` adds to ``--export``,
``-l proc=`` to ``--constraint``, ``-l naccelerators=`` to ``--gres``), as in sbatch.
Releases differ: ``#PBS -d``/``-w`` (working directory) are translated from Slurm 23.02 on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from clusterctl.sbatch.options import Arg
from clusterctl.sbatch.words import WordsError, directive_words

PBS, BSUB = "#PBS", "#BSUB"
SCAN_NON_COMMENTS = 100  # sbatch stops looking after this many lines that do not start with "#"
PBS_CHDIR_FROM = (23, 2)  # the release whose sbatch first translates #PBS -d and -w


class WrapperError(ValueError):
    """A #PBS/#BSUB directive sbatch would refuse, or one clusterd cannot translate."""

    def __init__(self, lineno: int, text: str, message: str) -> None:
        super().__init__(f"{text}: {message}")
        self.lineno = lineno
        self.text = text


@dataclass(frozen=True)
class Translated:
    """One sbatch option a #PBS/#BSUB line stands for."""

    lineno: int
    text: str  # the line as written
    option: str  # sbatch's long name
    value: str | None  # None for a flag


@dataclass(frozen=True)
class _Word:
    lineno: int
    text: str
    word: str


# Each family's options: letter -> (long name, Arg); the long names are the family's own.
PBS_OPTIONS: dict[str, tuple[str, Arg]] = {
    "a": ("start_time", Arg.REQUIRED),
    "A": ("account", Arg.REQUIRED),
    "c": ("checkpoint", Arg.REQUIRED),
    "C": ("working_dir", Arg.REQUIRED),
    "e": ("error", Arg.REQUIRED),
    "h": ("hold", Arg.NONE),
    "I": ("interactive", Arg.NONE),
    "j": ("join", Arg.REQUIRED),  # optional only in its long form, as getopt
    "J": ("job_array", Arg.REQUIRED),
    "k": ("keep", Arg.REQUIRED),
    "l": ("resource_list", Arg.REQUIRED),
    "m": ("mail_options", Arg.REQUIRED),
    "M": ("mail_user_list", Arg.REQUIRED),
    "N": ("job_name", Arg.REQUIRED),
    "o": ("out", Arg.REQUIRED),
    "p": ("priority", Arg.REQUIRED),
    "q": ("destination", Arg.REQUIRED),
    "r": ("rerunable", Arg.REQUIRED),
    "S": ("script_path", Arg.REQUIRED),
    "t": ("array", Arg.REQUIRED),
    "u": ("running_user", Arg.REQUIRED),
    "v": ("variable_list", Arg.REQUIRED),
    "V": ("all_env", Arg.NONE),
    "W": ("attributes", Arg.REQUIRED),
    "z": ("no_std", Arg.NONE),
}
_PBS_LONG_OPTIONAL = {"join"}
PBS_NEWER = {"d", "w"}  # short only, from PBS_CHDIR_FROM on
BSUB_OPTIONS: dict[str, tuple[str, Arg]] = {
    "c": ("cwd", Arg.REQUIRED),
    "e": ("error_file", Arg.REQUIRED),
    "J": ("job_name", Arg.REQUIRED),
    "m": ("hostname", Arg.REQUIRED),
    "M": ("memory_limit", Arg.REQUIRED),
    "n": ("", Arg.REQUIRED),  # short only
    "o": ("output_file", Arg.REQUIRED),
    "q": ("queue_name", Arg.REQUIRED),
    "W": ("time", Arg.REQUIRED),
    "x": ("exclusive", Arg.NONE),
}
# The letters sbatch turns into one sbatch option each, and (PBS_IGNORED) those it ignores.
PBS_DIRECT = {"a": "begin", "A": "account", "e": "error", "o": "output", "h": "hold", "J": "array", "t": "array"}
PBS_DIRECT |= {"M": "mail-user", "N": "job-name", "p": "nice", "q": "partition", "d": "chdir", "w": "chdir"}
PBS_IGNORED = "cCIjkrSuVz"
BSUB_DIRECT = {"c": "chdir", "e": "error", "J": "job-name", "o": "output", "q": "partition", "W": "time"}
# The translations that are more than a renamed option, as docs/sbatch-options.md words them.
PBS_NOTES = {
    "l": "the resource list: see below",
    "m": "`--mail-type`: a is FAIL, b BEGIN, e END, n NONE",
    "v": "`--export`, after the variables set so far",
    "W": "`depend=`: `--dependency`; `umask=`: refused (no sbatch option clusterd takes); others ignored",
}
BSUB_NOTES = {
    "m": "`--nodelist` (spaces become commas)",
    "M": "`--mem-per-cpu` (a number alone is KB, as in LSF)",
    "n": "`--ntasks` (of MIN,MAX the MAX)",
    "x": "`--exclusive`",
}
RESOURCE_NOTES = {
    "accelerator=": "true: `--gres=gpu:1`",
    "naccelerators=": "`--gres=gpu:N`, after the GRES set so far",
    "nodes=": "counts: `--nodes`; ppn=: `--ntasks` (ppn times nodes); names: `--nodelist`; gpus=: `--gpus-per-node`",
    "proc=": "`--constraint`, before the one set so far (the key after it is skipped, as by sbatch)",
}


def family_lines(lines: list[str], family: str) -> list[int]:
    """Indexes of ``family``'s lines sbatch reads: up to the 101st line that does not start with ``#``."""
    out: list[int] = []
    others = 0
    for index, line in enumerate(lines):
        if line.startswith(family):
            out.append(index)
        elif not line.startswith("#"):
            others += 1
            if others > SCAN_NON_COMMENTS:
                break
    return out


def wrapper_lines(lines: list[str]) -> list[int]:
    """Every #PBS and #BSUB line sbatch would read (what a script handed on must not keep)."""
    return sorted({*family_lines(lines, PBS), *family_lines(lines, BSUB)})


def _words(lines: list[str], family: str) -> list[_Word]:
    out: list[_Word] = []
    for index in family_lines(lines, family):
        text = lines[index].strip()
        try:
            words = directive_words(lines[index][len(family) :])
        except WordsError as exc:
            raise WrapperError(index + 1, text, f"cannot read the directive: {exc}") from None
        out.extend(_Word(index + 1, text, w) for w in words)
    if family == BSUB:  # sbatch reads "-cwd" in an option's place as -c (getopt has no long "-cwd")
        out = [_Word(w.lineno, w.text, "-c") if w.word == "-cwd" and i % 2 == 0 else w for i, w in enumerate(out)]
    return out


def _getopt(words: list[_Word], table: dict[str, tuple[str, Arg]], family: str) -> list[tuple[_Word, str, str | None]]:
    """(word, letter, value) for each option, read like getopt_long with "+" (stop at a non-option)."""
    long_names = {name: letter for letter, (name, _arg) in table.items() if name}
    out: list[tuple[_Word, str, str | None]] = []
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if w.word == "--":
            break
        if w.word.startswith("--"):
            key, eq, value = w.word[2:].partition("=")
            matches = [n for n in long_names if n == key] or [n for n in long_names if n.startswith(key)]
            if len(matches) != 1:
                why = "ambiguous" if matches else "unknown"
                raise WrapperError(w.lineno, w.text, f"--{key} is an {why} {family} option")
            letter = long_names[matches[0]]
            arg = Arg.OPTIONAL if matches[0] in _PBS_LONG_OPTIONAL and family == PBS else table[letter][1]
            if arg is Arg.NONE and eq:
                raise WrapperError(w.lineno, w.text, f"--{matches[0]} takes no value")
            val: str | None = value if eq else None
            if arg is Arg.REQUIRED and not eq:
                if i >= len(words):
                    raise WrapperError(w.lineno, w.text, f"--{matches[0]} needs a value")
                val = words[i].word
                i += 1
            out.append((w, letter, val))
        elif w.word.startswith("-") and len(w.word) > 1:
            j = 1
            while j < len(w.word):
                letter = w.word[j]
                if letter not in table:
                    raise WrapperError(w.lineno, w.text, _unknown(letter, family))
                rest = w.word[j + 1 :]
                if table[letter][1] is Arg.NONE:
                    out.append((w, letter, None))
                    j += 1
                    continue
                if not rest:
                    if i >= len(words):
                        raise WrapperError(w.lineno, w.text, f"-{letter} needs a value")
                    rest = words[i].word
                    i += 1
                out.append((w, letter, rest))
                break
        else:
            i -= 1
            break
    if i < len(words):
        w = words[i]
        raise WrapperError(w.lineno, w.text, f"{w.word[:40]!r} is not an option (sbatch: invalid argument)")
    return out


def _unknown(letter: str, family: str) -> str:
    if family == PBS and letter in PBS_NEWER:
        return f"-{letter} is translated by sbatch from Slurm 23.02 on; this cluster's sbatch refuses it"
    return f"-{letter} is not a {family} option sbatch translates"


Emit = Callable[[str, str | None], None]


def _mail_type(letters: str) -> str | None:
    """#PBS -m's letters (b: begin, e: end, a: abort, n: none) as sbatch's --mail-type."""
    found = [t for keys, t in (("bB", "BEGIN"), ("eE", "END"), ("aA", "FAIL")) if any(k in letters for k in keys)]
    if "n" in letters or "N" in letters:
        return "NONE"
    return ",".join(found) or None


_LEADING_INT = re.compile(r"\s*([+-]?[0-9]{1,18})")
_NUMBER = re.compile(r"[0-9]{1,9}\Z")


def _leading_int(text: str) -> int:
    """strtol's reading of a count (digits past 18 are dropped: the count is refused later anyway)."""
    m = _LEADING_INT.match(text)
    return int(m.group(1)) if m else 0


def _number(text: str | None) -> int | None:
    return int(text) if text and _NUMBER.match(text) else None


def _until(text: str, i: int, stops: str) -> tuple[str, int]:
    """The text from ``i`` up to a stop character, and the index past that character."""
    end = i
    while end < len(text) and text[end] not in stops:
        end += 1
    return text[i:end], min(end + 1, len(text))


def _nodes(spec: str, emit: Emit) -> None:
    """``-l nodes=``: counts (summed), ``ppn=`` (summed, times the nodes), host names, ``gpus=``."""
    i = ppn = count = 0
    hosts: list[str] = []
    while i < len(spec):
        if spec.startswith("gpus=", i):
            value, i = _until(spec, i + 5, "+:")
            emit("gpus-per-node", value)
        elif spec.startswith("ppn=", i):
            ppn += _leading_int(spec[i + 4 :])
            i = _until(spec, i + 4, "+:")[1]
        elif spec[i] in "0123456789":
            count += _leading_int(spec[i:])
            i = _until(spec, i, "+:")[1]
        elif spec[i].isascii() and spec[i].isalpha():
            name, i = _until(spec, i, "+:")
            hosts.append(name)
        else:
            i += 1
    if count:
        emit("nodes", str(count))
    if ppn:
        emit("ntasks", str(ppn * max(count, 1)))
    if hosts:
        emit("nodelist", ",".join(hosts))


def _size(value: str) -> str:
    """Torque's sizes end in B (``1gb``): sbatch drops that letter."""
    return value[:-1] if value[-1:] in ("b", "B") else value


# -l keys: (key, case-insensitive, the sbatch option its value sets, what ends the value); None: skipped.
RESOURCES: tuple[tuple[str, bool, str | None, str], ...] = (
    ("arch=", False, None, ","),
    ("cput=", False, "time", ","),
    ("file=", False, "tmp", ","),
    ("host=", False, None, ","),
    ("mem=", False, "mem", ","),
    ("mpiprocs=", True, "ntasks-per-node", ":"),
    ("ncpus=", True, "mincpus", ":"),
    ("nice=", False, "nice", ","),
    ("opsys=", False, None, ","),
    ("other=", False, None, ","),
    ("pcput=", False, "time", ","),
    ("pmem=", False, None, ","),
    ("pvmem=", False, None, ","),
    ("select=", True, "nodes", ":"),
    ("software=", False, None, ","),
    ("vmem=", False, None, ","),
    ("walltime=", False, "time", ","),
)
_PRO_KEYS = {"select=": 1, "ncpus=": 2, "mpiprocs=": 4}  # all three: --cpus-per-task from their ratio


def _resource_list(rl: str, emit: Emit, current: Mapping[str, str | None], where: _Word) -> None:
    """``#PBS -l``: each known key read where it starts (sbatch scans the list character by character)."""
    i = gpus = pro = 0
    while i < len(rl):
        rest = rl[i:]
        low = rest.lower()
        if low.startswith("accelerator="):
            i += 12
            if rl[i : i + 4].lower() == "true" and gpus < 1:
                gpus = 1
            continue
        if low.startswith("naccelerators="):
            value, i = _until(rl, i + 14, ",")
            count = _number(value)
            if not count:
                raise WrapperError(where.lineno, where.text, f"naccelerators={value[:40]!r}: not a positive number")
            gpus = count
            continue
        if rest.startswith("nodes="):
            value, i = _until(rl, i + 6, ",")
            _nodes(value, emit)
            continue
        if rest.startswith("proc="):
            value, i = _until(rl, i + 5, ",")
            constraint = current.get("constraint")
            emit("constraint", f"{value},{constraint}" if constraint else value)
            i = _until(rl, i, ",")[1]  # sbatch steps over the key after proc= too
            continue
        for key, folded, option, stops in RESOURCES:
            if (low if folded else rest).startswith(key):
                value, i = _until(rl, i + len(key), stops)
                if option is not None:
                    emit(option, _size(value) if option in ("mem", "tmp") else value)
                pro |= _PRO_KEYS.get(key, 0)
                break
        else:
            i += 1
    mincpus, per_node = _number(current.get("mincpus")), _number(current.get("ntasks-per-node"))
    if pro == 7 and mincpus and per_node and mincpus > per_node:
        emit("cpus-per-task", str(mincpus // per_node))
    if gpus > 0:
        gres = current.get("gres")
        emit("gres", f"{gres},gpu:{gpus}" if gres else f"gpu:{gpus}")


def _pbs(letter: str, value: str | None, emit: Emit, current: Mapping[str, str | None], w: _Word) -> None:
    if letter in PBS_IGNORED:
        return
    if letter == "l":
        _resource_list(value or "", emit, current, w)
    elif letter == "m":
        mail = _mail_type(value or "")
        if mail is None:
            raise WrapperError(w.lineno, w.text, f"-m {value!r}: no mail event (a, b, e or n)")
        emit("mail-type", mail)
    elif letter == "v":
        export = current.get("export")
        emit("export", f"{export},{value}" if export else value)
    elif letter == "W":
        attribute = value or ""
        if attribute.lower().startswith("depend="):
            emit("dependency", attribute[7:])
        elif attribute.lower().startswith("umask="):
            raise WrapperError(
                w.lineno, w.text, "-W umask= has no sbatch option clusterd takes (set the umask in the script)"
            )
    else:
        emit(PBS_DIRECT[letter], value)


def _bsub(letter: str, value: str | None, emit: Emit, w: _Word) -> None:
    if letter == "x":
        emit("exclusive", None)
    elif letter == "m":
        emit("nodelist", (value or "").replace(" ", ","))
    elif letter == "M":
        memory = value or ""
        emit("mem-per-cpu", f"{memory}K" if memory[-1:].isdigit() else memory)  # LSF's unit is KB
    elif letter == "n":
        low, comma, high = (value or "").partition(",")
        if comma and not high:
            raise WrapperError(w.lineno, w.text, f"-n {value!r}: give MIN,MAX or N")
        emit("ntasks", high if comma else low)
    else:
        emit(BSUB_DIRECT[letter], value)


def translate(
    script: str, current: Mapping[str, str | None], release: tuple[int, int] | None = None
) -> list[Translated]:
    """The sbatch options the script's #BSUB lines stand for, or else its #PBS lines, in order.

    ``current``: each option's value as the #SBATCH lines left it (what some translations add to).
    ``release``: the Slurm release whose sbatch is matched (None: the newest).

    Raises:
        WrapperError: naming the line, for an option sbatch refuses or clusterd cannot translate.
    """
    lines = script.split("\n")
    family = BSUB if family_lines(lines, BSUB) else PBS
    table = dict(PBS_OPTIONS) if family == PBS else BSUB_OPTIONS
    if family == PBS and (release is None or release >= PBS_CHDIR_FROM):
        table |= {letter: ("", Arg.REQUIRED) for letter in PBS_NEWER}
    state = dict(current)
    out: list[Translated] = []
    for w, letter, value in _getopt(_words(lines, family), table, family):

        def emit(option: str, val: str | None, w: _Word = w) -> None:
            state[option] = val
            out.append(Translated(w.lineno, w.text, option, val))

        if family == PBS:
            _pbs(letter, value, emit, state, w)
        else:
            _bsub(letter, value, emit, w)
    return out
