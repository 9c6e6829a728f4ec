"""The one reader of sbatch option words: getopt's rules, then the refusal table."""

from __future__ import annotations

import pytest

from clusterctl.sbatch.options import Option, OptionError, RefusedOption, allowed_options


def test_allowed_options_are_returned_as_written() -> None:
    assert allowed_options(["-N2", "--partition=x", "-H"]) == [
        Option("nodes", "2", "-N"),
        Option("partition", "x", "--partition"),
        Option("hold", None, "-H"),
    ]


def test_a_refused_option_carries_what_each_caller_words_its_message_from() -> None:
    with pytest.raises(RefusedOption) as info:
        allowed_options(["-t", "5", "--prio=3"])
    assert (info.value.option, info.value.written) == ("priority", "--prio")
    assert info.value.reason.startswith("setting a job's priority")
    assert str(info.value) == f"--priority is not allowed ({info.value.reason})"


def test_a_malformed_word_is_an_option_error_not_a_refusal() -> None:
    with pytest.raises(OptionError) as info:
        allowed_options(["--par=x"])
    assert not isinstance(info.value, RefusedOption)
    assert "ambiguous" in str(info.value)


def test_errors_and_options_tell_which_word_they_start_at() -> None:
    assert [o.index for o in allowed_options(["-t", "5", "-HN2", "--comment", "x"])] == [0, 2, 2, 3]
    for words, index in ((["-t", "5", "--frob"], 2), (["-H", "--uid=0"], 1), (["-t", "5", "--", "x"], 3)):
        with pytest.raises(OptionError) as info:
            allowed_options(words)
        assert info.value.index == index, words
