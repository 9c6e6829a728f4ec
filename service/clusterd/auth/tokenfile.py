"""Editing the tokens file for ``clusterd token add|revoke|list``.

The running service only reads the file (and re-reads it on mtime change), so every edit here is
an atomic rewrite: a temp file in the same directory, created 0600, fsynced, renamed over the old
one. A reader therefore sees the old set or the new set, never half a file. Concurrent edits are
serialised with an flock on a ``.lock`` file beside it, so two ``token add`` runs cannot drop one
another's entry. Plaintext tokens are never written: only their SHA-256.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from clusterd.auth.tokens import TokenEntry, TokenFileError, parse_tokens, token_digest

TOKEN_BYTES = 32  # 256 bits of randomness; printed url-safe base64, ~43 characters
MIN_PREFIX = 6
_HEADER = "# clusterd tokens: SHA-256 digests only (clusterd token add|revoke|list). Keep this file 0600.\n"


def new_token() -> str:
    """A fresh random bearer token (what the user gets, once)."""
    return "cd_" + secrets.token_urlsafe(TOKEN_BYTES)


def _quote(text: str) -> str:
    """A TOML basic string: user names come from the command line, so escape everything odd."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def render(entries: list[TokenEntry]) -> str:
    """The file text for ``entries``; plaintext entries are written as digests (upgrading the file)."""
    parts = [_HEADER]
    for e in entries:
        parts.append(
            f'\n[[token]]\nuser = {_quote(e.user)}\ntoken_sha256 = "{e.digest}"\nadmin = {str(e.admin).lower()}\n'
        )
    return "".join(parts)


def read_entries(path: Path) -> list[TokenEntry]:
    """Entries of ``path``; a missing file is an empty list (``token add`` creates it)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise TokenFileError(f"cannot read tokens file {path}: {exc.strerror}") from exc
    return parse_tokens(text, str(path))


def write_entries(path: Path, entries: list[TokenEntry]) -> None:
    """Atomically replace ``path`` with ``entries`` (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(render(entries))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)  # in case the umask or an inherited ACL widened it
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock for one read-modify-write of the tokens file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def add_token(path: Path, user: str, *, admin: bool = False) -> tuple[str, TokenEntry]:
    """Create a token for ``user``; returns (plaintext, entry). Only the digest reaches the disk."""
    if not user or any(ord(c) < 33 for c in user) or len(user) > 64:
        raise TokenFileError(f"bad user name {user[:64]!r}")
    token = new_token()
    entry = TokenEntry(user, token_digest(token), admin)
    with locked(path):
        entries = read_entries(path)
        write_entries(path, [*entries, entry])
    return token, entry


def revoke_tokens(path: Path, *, user: str | None = None, prefix: str | None = None) -> list[TokenEntry]:
    """Remove every entry of ``user``, or the entries whose digest starts with ``prefix``.

    Raises:
        TokenFileError: nothing matched, or the prefix is too short to name a token safely.
    """
    if (user is None) == (prefix is None):
        raise TokenFileError("give a user or --prefix, not both")
    if prefix is not None:
        prefix = prefix.lower()
        if len(prefix) < MIN_PREFIX:
            raise TokenFileError(f"--prefix needs at least {MIN_PREFIX} hex digits")
    with locked(path):
        entries = read_entries(path)
        gone = [e for e in entries if (e.user == user if user is not None else e.digest.startswith(prefix or ""))]
        if not gone:
            raise TokenFileError(f"no token matches {user if user is not None else prefix!r} in {path}")
        write_entries(path, [e for e in entries if e not in gone])
    return gone
