"""Where the last N lines of an output file start (clusterd.jobs.logfile)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clusterd.jobs import logfile


@pytest.mark.parametrize(
    ("text", "lines", "tail"),
    [
        (b"a\nb\nc\n", 1, b"c\n"),
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 2, b"b\nc"),  # no final newline: the partial line counts
        (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 0, b"a\nb\nc\n"),  # 0: the whole file
        (b"", 3, b""),
        (b"\n\n\n", 2, b"\n\n"),
    ],
)
def test_tail_matches_tail_n(tmp_path: Path, text: bytes, lines: int, tail: bytes) -> None:
    path = tmp_path / "out"
    path.write_bytes(text)
    fd = os.open(path, os.O_RDONLY)
    try:
        start = logfile.tail_offset(fd, len(text), lines)
        assert logfile.read_at(fd, start, 1 << 20) == tail
    finally:
        os.close(fd)


def test_tail_spans_blocks(tmp_path: Path) -> None:
    text = b"".join(b"line %06d " % i + b"x" * 100 + b"\n" for i in range(5000))  # ~550 KiB: many 64 KiB blocks
    path = tmp_path / "out"
    path.write_bytes(text)
    fd = os.open(path, os.O_RDONLY)
    try:
        start = logfile.tail_offset(fd, len(text), 1500)
        assert logfile.read_at(fd, start, 20) == b"line 003500 " + b"x" * 8
    finally:
        os.close(fd)
