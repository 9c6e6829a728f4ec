"""Patterns that guard names and numbers match the whole text, ASCII only.

Python's ``$`` also matches before a trailing newline, and ``\\d`` matches any Unicode digit
(``int("\\u0663")`` is 3): a step named with Arabic-Indic digits or a key with a trailing newline must
not pass for a valid one.
"""

from __future__ import annotations

import argparse

import pytest

from clusterctl.checkpoint.layout import commit_key, parse_commit_key, parse_step_key
from clusterctl.cli import values
from clusterd.supervisor.progress import _newest

ARABIC_ONE = "\u0661"  # ARABIC-INDIC DIGIT ONE: str.isdigit() and \d say yes


def test_commit_keys_are_whole_and_ascii() -> None:
    key = commit_key(1)
    assert parse_commit_key(key) == 1
    assert parse_commit_key(key + "\n") is None
    assert parse_commit_key(key.replace("1.json", f"{ARABIC_ONE}.json")) is None


def test_step_keys_are_whole_and_ascii() -> None:
    assert parse_step_key("steps/000000000001/a1/rank-0.safetensors") is not None
    assert parse_step_key(f"steps/00000000000{ARABIC_ONE}/a1/rank-0.safetensors") is None


def test_the_supervisor_reads_only_ascii_marker_names() -> None:
    assert _newest(["000000000002.json", f"00000000000{ARABIC_ONE}.json", "000000000003.json\n"]) == 2


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (values.time_limit, f"1{ARABIC_ONE}"),
        (values.array_indexes, f"0-{ARABIC_ONE}"),
        (values.memory_mb, f"{ARABIC_ONE}G"),
        (values.env_name, "PATH\n"),
        (values.time_limit, "1\n0"),
    ],
)
def test_cli_values_refuse_non_ascii_digits_and_inner_newlines(parse: object, text: str) -> None:
    with pytest.raises((argparse.ArgumentTypeError, ValueError)):
        parse(text)  # type: ignore[operator]
