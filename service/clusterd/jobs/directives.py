"""A batch script's directive lines, read with sbatch's own rules, and neutralised for Slurm.

sbatch reads the comment block at the top of a script (up to the first line that is neither blank
nor a comment): ``#SBATCH`` lines as options, ``#SLURM`` lines as ``#SBATCH`` ones (sbatch asks for
them to be changed, and applies them), all their words read as one command line (an option's value
may be on the next line). Then, unless ``--ignore-pbs`` is given, the script's
``#BSUB`` or ``#PBS`` lines, translated as sbatch translates them (:mod:`clusterctl.sbatch.wrappers`);
they win over the ``#SBATCH`` lines. A line's words are read as sbatch reads them
(:mod:`clusterctl.sbatch.words`: quotes group, an unquoted ``#`` starts a comment) and its options
like getopt_long (:mod:`clusterctl.sbatch.options`, the reader the CLI uses too): ``--name=v``,
``--name v``, ``-xv``, ``-x v``, and any unambiguous prefix of a long option; ``#SBATCH--time=5`` is
an option too, and a word that is not an option is an error, as sbatch says ("Invalid directive
found in batch script"). Every option either maps to a field the service knows (``ACCEPTED``) or is
refused with the script line named and the reason. The script handed to Slurm has its directive
lines turned into plain comments (same line count), so Slurm applies only the options rendered from
the validated request: the allowlist holds by construction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterctl.sbatch.options import ACCEPTED, OptionError, allowed_options, resolve_long
from clusterctl.sbatch.words import WordsError, directive_words
from clusterctl.sbatch.wrappers import WrapperError, translate, wrapper_lines

_FAMILIES = ("#SBATCH", "#SLURM")
_HETJOB = re.compile(r"\s*(?:hetjob|packjob)(?:\s|\Z)", re.IGNORECASE)  # sbatch's component separator
NEUTRAL_PREFIX = "#clusterd:"  # what a directive line starts with once neutralised


class DirectiveError(ValueError):
    """A directive sbatch would apply that clusterd cannot: the message names the script line."""

    def __init__(self, lineno: int, message: str) -> None:
        super().__init__(f"script line {lineno}: {message}")
        self.lineno = lineno


@dataclass(frozen=True)
class Directive:
    """One option from the header, resolved to sbatch's full long name."""

    lineno: int  # 0: not from the script (spec.sbatch_options)
    option: str  # long name, e.g. "partition"
    value: str | None  # None for a flag given without a value
    text: str  # as written, for error messages ("#SBATCH --par=debug")
    field: str = "spec.script"  # the request field it came from

    @property
    def where(self) -> str:
        """Where it was written, for messages: ``script line 3: #SBATCH -t 5`` or the spec element."""
        return f"script line {self.lineno}: {self.text}" if self.lineno else self.text


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


@dataclass(frozen=True)
class _Word:
    lineno: int
    text: str  # the line, for messages
    word: str


def _sbatch_lines(lines: list[str]) -> list[Directive]:
    """The header's #SBATCH/#SLURM lines: their words read as one command line, as sbatch reads them
    (``#SBATCH --job-name`` then ``#SBATCH x`` names the job x); each option is told by its first word's line."""
    words: list[_Word] = []
    for index in range(header_end(lines)):
        line = lines[index].rstrip("\r")
        family = _family(line)
        if family is None:
            continue
        text = line.strip()
        body = line[len(family) :]  # "#SBATCH--time=5" is an option to sbatch, "#SBATCHfoo" an error
        if _HETJOB.match(body):
            raise DirectiveError(index + 1, f"{text}: heterogeneous jobs are refused (clusterd submits one job)")
        try:
            words.extend(_Word(index + 1, text, w) for w in directive_words(body))
        except WordsError as exc:
            raise DirectiveError(index + 1, f"{text}: cannot read the directive: {exc}") from None
    try:
        options = allowed_options([w.word for w in words])
    except OptionError as exc:
        where = words[min(exc.index, len(words) - 1)]
        raise DirectiveError(where.lineno, f"{where.text}: {exc}") from None
    return [Directive(words[o.index].lineno, o.name, o.value, words[o.index].text) for o in options]


def parse_directives(
    script: str, *, release: tuple[int, int] | None = None, ignore_pbs: bool = False
) -> list[Directive]:
    """Every option of the script's directives in sbatch's order (later ones win), each checked
    against the table: ``#SBATCH`` lines, then the ``#BSUB``/``#PBS`` lines' translations unless
    ``ignore_pbs`` (given outside the script) or an ``#SBATCH --ignore-pbs``.

    ``release``: the Slurm release whose sbatch is matched (None: the newest).
    Raises DirectiveError naming the line for a refused option.
    """
    lines = script.split("\n")
    out = _sbatch_lines(lines)
    if ignore_pbs or any(d.option == "ignore-pbs" for d in out):
        return out
    try:
        translated = translate(script, {d.option: d.value for d in out}, release)
    except WrapperError as exc:
        raise DirectiveError(exc.lineno, str(exc)) from None
    for t in translated:
        word = f"--{t.option}" if t.value is None else f"--{t.option}={t.value}"
        text = f"{t.text} (sbatch: {word[:80]})"
        try:
            options = allowed_options([word])
        except OptionError as exc:
            raise DirectiveError(t.lineno, f"{text}: {exc}") from None
        out.extend(Directive(t.lineno, o.name, o.value, text) for o in options)
    return out


def neutralise(script: str) -> str:
    """The script with every directive line of its header made a plain comment, line numbers kept.

    Slurm then applies only the options rendered from the request.
    """
    lines = script.split("\n")
    for index in [i for i in range(header_end(lines)) if _family(lines[i]) is not None] + wrapper_lines(lines):
        lines[index] = NEUTRAL_PREFIX + lines[index][1:]
    return "\n".join(lines)


def parse_options(words: list[str], field: str = "spec.sbatch_options") -> list[Directive]:
    """Options given outside the script (the CLI's command line and SBATCH_* variables), one per
    element, read with the same rules and allowlist as directive lines.

    Raises ValueError naming the element.
    """
    out: list[Directive] = []
    for i, word in enumerate(words):
        where = f"{field}[{i}] {word[:80]!r}"
        try:
            options = allowed_options([word])
        except OptionError as exc:
            raise ValueError(f"{where}: {exc}") from None
        out.extend(Directive(0, o.name, o.value, where, field) for o in options)
    return out


__all__ = [
    "ACCEPTED",
    "Directive",
    "DirectiveError",
    "neutralise",
    "parse_directives",
    "parse_options",
    "resolve_long",
]
