"""Hashed tokens: file format, constant-time comparison, reload off the event loop, `clusterd token
add|revoke|list`, and clients that take tokens from the environment or a private file, never argv."""

from __future__ import annotations

import argparse
import asyncio
import hmac
import logging
import os
import pwd
import stat
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from clusterctl.cli.main import main as cli_main
from clusterctl.client import resolve_token
from clusterctl.errors import UsageError
from clusterctl.v1 import jobs_pb2
from clusterd.auth import tokens as tokens_mod
from clusterd.auth.tokenfile import add_token, read_entries
from clusterd.auth.tokens import TokenFileError, TokenStore, parse_tokens, token_digest
from clusterd.main import build_parser, main
from tests.support.privileges import needs_root

from ..conftest import USER_A, auth, base_config, code_of, running, stub


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_hashed_entries_authenticate_and_plaintext_is_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f = tmp_path / "tokens.toml"
    f.write_text(
        f'[[token]]\nuser = "alice"\ntoken_sha256 = "{token_digest("alice-secret-token-1")}"\n'
        '[[token]]\nuser = "bob"\ntoken = "bob-plain-token-0123"\nadmin = true\n'
    )
    f.chmod(0o600)
    with caplog.at_level(logging.WARNING):
        store = TokenStore(f)
    assert "plaintext tokens for bob" in caplog.text
    alice = store.authenticate("alice-secret-token-1")
    assert alice is not None and alice.user == "alice" and not alice.admin
    bob = store.authenticate("bob-plain-token-0123")
    assert bob is not None and bob.admin
    assert store.authenticate(token_digest("alice-secret-token-1")) is None  # the digest is not a token
    assert store.authenticate("alice-secret-token-") is None
    assert store.authenticate("") is None


@pytest.mark.parametrize(
    "entry",
    [
        'user = "a"\ntoken_sha256 = "abc"',
        'user = "a"\ntoken_sha256 = "' + "g" * 64 + '"',
        'user = "a"\ntoken = "0123456789abcdef"\ntoken_sha256 = "' + "a" * 64 + '"',
        'user = "a"',
        'token_sha256 = "' + "a" * 64 + '"',
    ],
)
def test_malformed_hashed_entries_are_refused(entry: str) -> None:
    with pytest.raises(TokenFileError):
        parse_tokens("[[token]]\n" + entry)


def test_every_entry_is_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first match does not end the loop: timing does not reveal which entry matched."""
    f = tmp_path / "tokens.toml"
    toks = [f"token-number-{i:04d}-xxxx" for i in range(20)]
    f.write_text("".join(f'[[token]]\nuser = "u{i}"\ntoken_sha256 = "{token_digest(t)}"\n' for i, t in enumerate(toks)))
    store = TokenStore(f)
    calls = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(len(a))
        return real(a, b)

    monkeypatch.setattr(tokens_mod.hmac, "compare_digest", counting)
    ident = store.authenticate(toks[0])
    assert ident is not None and ident.user == "u0"
    assert calls == [32] * 20  # SHA-256 digests of equal length, every entry


def test_token_cli_add_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "etc" / "tokens.toml"
    rc, token, err = run_cli(capsys, "token", "--tokens-file", str(f), "add", "alice")
    token = token.strip()
    assert rc == 0 and token.startswith("cd_") and len(token) > 40 and "shown only this once" in err
    rc, admin_token, _ = run_cli(capsys, "token", "add", "root", "--admin", "--tokens-file", str(f))
    admin_token = admin_token.strip()
    assert rc == 0
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    text = f.read_text()
    assert token not in text and admin_token not in text
    assert token_digest(token) in text
    store = TokenStore(f)
    ident = store.authenticate(admin_token)
    assert ident is not None and ident.user == "root" and ident.admin

    rc, listing, _ = run_cli(capsys, "token", "list", "--tokens-file", str(f))
    assert rc == 0 and "alice" in listing and "root" in listing and "yes" in listing
    assert token not in listing and token_digest(token) not in listing  # a prefix only
    assert token_digest(token)[:12] in listing

    rc, out, _ = run_cli(capsys, "token", "revoke", "--prefix", token_digest(admin_token)[:10], "--tokens-file", str(f))
    assert rc == 0 and "root" in out
    store.maybe_reload()  # what the service's watcher does every tokens_reload_seconds
    assert store.authenticate(admin_token) is None  # picked up without restart
    assert store.authenticate(token) is not None
    rc, _, err = run_cli(capsys, "token", "revoke", "--prefix", "abc", "--tokens-file", str(f))
    assert rc == 1 and "at least" in err
    rc, _, _ = run_cli(capsys, "token", "revoke", "alice", "--tokens-file", str(f))
    store.maybe_reload()
    assert rc == 0 and store.authenticate(token) is None
    rc, _, err = run_cli(capsys, "token", "revoke", "alice", "--tokens-file", str(f))
    assert rc == 1 and "no token matches" in err
    assert not [p for p in f.parent.iterdir() if p.name.endswith(".tmp")]


def test_add_upgrades_plaintext_entries_to_digests(tmp_path: Path) -> None:
    f = tmp_path / "tokens.toml"
    f.write_text('[[token]]\nuser = "old"\ntoken = "legacy-plain-token-42"\n')
    add_token(f, "new")
    assert "legacy-plain-token-42" not in f.read_text()
    assert TokenStore(f).authenticate("legacy-plain-token-42") is not None
    assert [e.user for e in read_entries(f)] == ["old", "new"]


def test_user_names_cannot_inject_toml(tmp_path: Path) -> None:
    f = tmp_path / "tokens.toml"
    with pytest.raises(TokenFileError):
        add_token(f, 'x"\nadmin = true\n[[token]]\nuser = "y')
    add_token(f, 'we"ird\\name')
    assert [e.user for e in read_entries(f)] == ['we"ird\\name']


async def test_running_service_sees_added_and_revoked_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = base_config(tmp_path)
    f = tmp_path / "hashed.toml"
    cfg = replace(cfg, tokens_file=str(f))
    add_token(f, "nobody")  # the service needs a valid file at start
    async with running(cfg) as daemon, grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:

        async def until(code: grpc.StatusCode) -> None:
            """The watcher checks the file every tokens_reload_seconds: wait (bounded) for it to see the edit."""
            deadline = asyncio.get_running_loop().time() + 30
            while await code_of(stub(ch).ListJobs(jobs_pb2.ListJobsRequest(), metadata=meta)) != code:
                assert asyncio.get_running_loop().time() < deadline, f"token file edit not picked up ({code.name})"
                await asyncio.sleep(0.1)

        _, token, _ = run_cli(capsys, "token", "add", "daemon", "--tokens-file", str(f))
        meta = [("authorization", f"Bearer {token.strip()}")]
        await until(grpc.StatusCode.OK)
        run_cli(capsys, "token", "revoke", "daemon", "--tokens-file", str(f))
        await until(grpc.StatusCode.UNAUTHENTICATED)


async def test_token_file_is_read_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """authenticate() does no file I/O; the watcher stats (and re-reads) in a worker thread."""
    f = tmp_path / "tokens.toml"
    token, _ = add_token(f, "alice")
    store = TokenStore(f)
    loop_thread = threading.get_ident()
    stats: list[int] = []
    real_stat = Path.stat

    def spying_stat(self: Path, **kw: Any) -> os.stat_result:
        if self == f:
            stats.append(threading.get_ident())
        return real_stat(self, **kw)

    monkeypatch.setattr(Path, "stat", spying_stat)
    assert store.authenticate(token) is not None
    assert stats == []  # no stat on the caller's (the event loop's) thread
    stop = asyncio.Event()
    watcher = asyncio.create_task(store.watch(stop, 0.05))
    while not stats:
        await asyncio.sleep(0.01)
    f.unlink()  # a vanished file keeps the loaded tokens
    await asyncio.sleep(0.1)
    stop.set()
    await watcher
    assert loop_thread not in stats
    assert store.authenticate(token) is not None


def test_broken_file_keeps_previous_tokens(tmp_path: Path) -> None:
    f = tmp_path / "tokens.toml"
    token, _ = add_token(f, "alice")
    store = TokenStore(f)
    f.write_text("[[token]\nbroken")
    os.utime(f, ns=(f.stat().st_mtime_ns + 10**9, f.stat().st_mtime_ns + 10**9))
    assert store.authenticate(token) is not None


def test_token_cli_takes_config_before_or_after_the_action(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokens = tmp_path / "tokens.toml"
    cfg = tmp_path / "clusterd.toml"
    cfg.write_text(f'tokens_file = "{tokens}"\n')
    assert run_cli(capsys, "token", "add", "alice", "--config", str(cfg))[0] == 0
    assert run_cli(capsys, "token", "--config", str(cfg), "add", "bob")[0] == 0
    rc, listing, _ = run_cli(capsys, "token", "list", "--config", str(cfg))
    assert rc == 0 and "alice" in listing and "bob" in listing


# ----------------------------------------------------------------- tokens never in argv (ps shows argv)


@pytest.mark.parametrize(
    "argv",
    [["--token", "s3cret", "list"], ["list", "--token=s3cret"], ["list", "--tok", "x"], ["status", "1", "--token"]],
)
def test_cli_refuses_a_token_on_the_command_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    def no_client(args: object) -> object:
        raise AssertionError("no call may be made with a token from argv")

    assert cli_main(argv, client_factory=no_client) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if "--tok" in argv:  # no abbreviations (as sbatch's own flags): an unknown option, named
        assert "unrecognized arguments: --tok" in err
    else:
        assert "--token is not accepted" in err and "CLUSTERCTL_TOKEN_FILE" in err


def test_no_clusterd_command_takes_a_secret_as_an_argument() -> None:
    """Every option of every clusterd subcommand: none carries a token, key or password value."""

    def options(parser: argparse.ArgumentParser) -> Iterator[str]:
        for action in parser._actions:
            yield from action.option_strings
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from options(sub)

    secret = [
        o
        for o in options(build_parser())
        if any(w in o for w in ("token", "secret", "password", "key")) and not o.endswith("-file")
    ]
    assert secret == []


async def test_token_file_is_used_and_must_be_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CLUSTERCTL_TOKEN", raising=False)
    f = tmp_path / "token"
    f.write_text(auth(USER_A)[0][1].removeprefix("Bearer ") + "\n")
    f.chmod(0o600)
    monkeypatch.setenv("CLUSTERCTL_TOKEN_FILE", str(f))
    async with running(base_config(tmp_path)) as daemon:
        monkeypatch.setenv("CLUSTERCTL_ADDR", f"127.0.0.1:{daemon.port}")
        assert await asyncio.to_thread(cli_main, ["list", "--json"]) == 0
        f.write_text("not-the-token-0123456789\n")  # proves the file's token is the one sent
        assert await asyncio.to_thread(cli_main, ["list"]) == 1
        assert "the token was rejected" in capsys.readouterr().err
        for mode in (0o640, 0o604):
            f.chmod(mode)
            assert await asyncio.to_thread(cli_main, ["list"]) == 2
            err = capsys.readouterr().err
            assert f"is readable by group or others (mode {mode:o}): run chmod 600 {f}" in err
    f.chmod(0o600)
    f.write_text("\n")
    with pytest.raises(UsageError, match="one token on one line"):
        resolve_token()
    monkeypatch.setenv("CLUSTERCTL_TOKEN", "from-env")  # the environment variable wins over the file
    assert resolve_token() == "from-env"


@needs_root("gives the token file to another user")
def test_a_token_file_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERCTL_TOKEN", raising=False)
    f = tmp_path / "token"
    f.write_text("token-0123456789abcdef\n")
    f.chmod(0o600)
    os.chown(f, pwd.getpwnam("bob").pw_uid, -1)
    monkeypatch.setenv("CLUSTERCTL_TOKEN_FILE", str(f))
    with pytest.raises(UsageError, match="belongs to uid"):
        resolve_token()
