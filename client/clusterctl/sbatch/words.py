"""A directive line's words, read as sbatch reads them (``#SBATCH``, ``#PBS`` and ``#BSUB`` alike).

Words are split at whitespace; single or double quotes group characters, whitespace and ``#``
included (``--comment "#1"`` is one word, ``#1``); a backslash takes the next character as it is,
inside quotes too; an unquoted ``#`` ends the line (a trailing comment, even within a word). A word
that comes out empty (``""``) ends the line as well, as in sbatch. An unmatched quote, or a word
starting with ``:``, is an error.
"""

from __future__ import annotations


class WordsError(ValueError):
    """A directive line sbatch stops at (an unmatched quote, an unexpected ``:``)."""


def _word(text: str, start: int) -> tuple[str | None, int]:
    """The word at ``start`` (None: nothing more on the line) and where reading stopped."""
    i = start
    while i < len(text) and text[i].isspace():
        i += 1
    if i < len(text) and text[i] == ":":
        raise WordsError("unexpected ':'")
    chars: list[str] = []
    quote = ""
    escaped = False
    while i < len(text) and (quote or not text[i].isspace()):
        c = text[i]
        i += 1
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
            continue
        elif quote:
            if c == quote:
                quote = ""
                continue
        elif c in "\"'":
            quote = c
            continue
        elif c == "#":
            i -= 1  # the comment: nothing more on the line
            break
        chars.append(c)
    if quote:
        raise WordsError(f"unmatched {quote}")
    return ("".join(chars) if chars else None), i


def directive_words(text: str) -> list[str]:
    """The words of a directive line after its ``#SBATCH``/``#PBS``/``#BSUB``."""
    words: list[str] = []
    i = 0
    while True:
        word, i = _word(text, i)
        if word is None:
            return words
        words.append(word)
