"""A batch script's directive header, read with sbatch's own rules, and neutralised for Slurm.

sbatch reads the comment block at the top of a script (up to the first line that is neither blank
nor a comment): ``#SBATCH`` lines as options, ``#SLURM`` lines as ``#SBATCH`` ones (sbatch asks for
them to be changed, and applies them), ``#PBS``/``#BSUB`` lines unless ``--ignore-pbs``. Options are
parsed like getopt_long (:mod:`clusterctl.sbatch.options`, the parser the CLI uses too): ``--name=v``,
``--name v``, ``-xv``, ``-x v``, and any unambiguous prefix of a long option (``--par`` is ambiguous
to sbatch: ``--parsable``/``--partition``); ``#SBATCH--time=5`` is an option too, and a word that is
not an option is an error, as sbatch says ("Invalid directive found in batch script"). Every option
either maps to a field the service knows (``ACCEPTED``) or is refused with the script line named and
the reason. The script handed to Slurm has its directive lines turned into plain comments (same line
count), so Slurm applies only the options rendered from the validated request: the allowlist holds
by construction.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from clusterctl.sbatch.options import ACCEPTED, OptionError, parse_words, refusal, resolve_long

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
    try:
        options = parse_words(_tokens(lineno, body))
    except OptionError as exc:
        raise DirectiveError(lineno, f"{text}: {exc}") from None
    return [Directive(lineno, o.name, o.value, text) for o in options]


def parse_directives(script: str) -> list[Directive]:
    """Every option of the script's header in order (later ones win), each checked against the table.

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
        body = line[len(family) :]  # "#SBATCH--time=5" is an option to sbatch, "#SBATCHfoo" an error
        options_line = family in ("#SBATCH", "#SLURM")  # sbatch takes #SLURM lines as #SBATCH (saying so)
        if not options_line and body and not body[0].isspace():
            continue  # "#PBSX": a comment
        if not options_line:
            raise DirectiveError(
                lineno,
                f"{family} directives are refused (clusterd does not translate them into "
                "sbatch options as sbatch does): write the line as #SBATCH",
            )
        text = line.strip()
        for directive in _parse_line(lineno, text, body):
            why = refusal(directive.option)
            if why is not None:
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


def parse_options(words: list[str], field: str = "spec.sbatch_options") -> list[Directive]:
    """Options given outside the script (the CLI's command line and SBATCH_* variables), one per
    element, read with the same rules and allowlist as directive lines.

    Raises ValueError naming the element.
    """
    out: list[Directive] = []
    for i, word in enumerate(words):
        where = f"{field}[{i}] {word[:80]!r}"
        try:
            options = parse_words([word])
        except OptionError as exc:
            raise ValueError(f"{where}: {exc}") from None
        for o in options:
            why = refusal(o.name)
            if why is not None:
                raise ValueError(f"{where}: --{o.name} is not allowed ({why})")
            out.append(Directive(0, o.name, o.value, where, field))
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
