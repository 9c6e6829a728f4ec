"""Run ``main([...])`` against a FakeClient and capture exit code, stdout and stderr."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from clusterctl.cli.main import main

from .fakes import FakeClient


@dataclass
class Result:
    code: int
    out: str
    err: str


Runner = Callable[..., Result]


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient()


@pytest.fixture
def cli(fake: FakeClient, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Runner:
    """``cli("list", "--json")`` -> Result; the fake client answers, no server is needed."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("CLUSTERCTL_DEBUG", raising=False)

    def run(*argv: str) -> Result:
        code = main(list(argv), client_factory=lambda _args: fake)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
