"""A directive line's words, split as sbatch splits them."""

from __future__ import annotations

import pytest

from clusterctl.sbatch.words import WordsError, directive_words


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (" -N 2 --comment 'a b'", ["-N", "2", "--comment", "a b"]),
        (' --comment "#1" -t 5', ["--comment", "#1", "-t", "5"]),  # a quoted # is a value
        (" --comment=#1 -t 5", ["--comment="]),  # an unquoted # starts a comment, even within a word
        (" -J a#b -p x", ["-J", "a"]),
        (" -J a\\#b", ["-J", "a#b"]),
        (' -J "a\\"b"', ["-J", 'a"b']),  # a backslash escapes inside quotes too
        (" -J x'y z'w", ["-J", "xy zw"]),
        (' -J "" -p x', ["-J"]),  # an empty word ends the line, as in sbatch
        ("--time=5", ["--time=5"]),
        ("   ", []),
    ],
)
def test_words(line: str, words: list[str]) -> None:
    assert directive_words(line) == words


@pytest.mark.parametrize(("line", "says"), [(" -J 'x", "unmatched '"), (" -J :x", "unexpected ':'")])
def test_lines_sbatch_stops_at(line: str, says: str) -> None:
    with pytest.raises(WordsError, match=says):
        directive_words(line)
