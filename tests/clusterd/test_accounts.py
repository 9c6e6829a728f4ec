"""clusterd.accounts: one lookup per account and minute, shared by every part that needs it."""

from __future__ import annotations

import os
import pwd
from typing import Any

import pytest

from clusterd.accounts import Accounts

from .conftest import USER_A


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names NSS is asked for (pwd.getpwnam), the real answer passed through."""
    seen: list[str] = []
    real = pwd.getpwnam

    def counted(name: str) -> Any:
        seen.append(name)
        return real(name)

    monkeypatch.setattr(pwd, "getpwnam", counted)
    return seen


def test_an_account_is_looked_up_once_while_kept(calls: list[str]) -> None:
    clock = Clock()
    table = Accounts(keep_seconds=60, clock=clock)
    assert table.cached(USER_A) is None
    first = table.lookup(USER_A)
    assert calls == [USER_A]
    clock.now += 59
    assert table.lookup(USER_A) is first and table.cached(USER_A) is first
    assert calls == [USER_A]
    clock.now += 2  # past the minute: asked again
    assert table.cached(USER_A) is None
    assert table.lookup(USER_A) == first
    assert calls == [USER_A, USER_A]


def test_the_account_carries_its_ids_home_and_every_group() -> None:
    account = Accounts().lookup(USER_A)
    entry = pwd.getpwnam(USER_A)
    assert (account.name, account.uid, account.gid, account.home) == (USER_A, entry.pw_uid, entry.pw_gid, entry.pw_dir)
    assert entry.pw_gid in account.groups
    assert set(account.groups) == set(os.getgrouplist(USER_A, entry.pw_gid))


def test_a_name_without_an_account_is_never_kept(calls: list[str]) -> None:
    table = Accounts()
    for _ in range(2):
        with pytest.raises(KeyError):
            table.lookup("no-such-user-here")
    assert calls == ["no-such-user-here"] * 2  # asked each time: an account made meanwhile shows at once


def test_forget_drops_every_kept_account(calls: list[str]) -> None:
    table = Accounts()
    table.lookup(USER_A)
    table.forget()
    assert table.cached(USER_A) is None
    table.lookup(USER_A)
    assert calls == [USER_A, USER_A]
