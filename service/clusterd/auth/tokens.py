"""Bearer tokens from a TOML file of ``[[token]]`` tables, stored as SHA-256 digests.

An entry is ``user = "...", token_sha256 = "<64 hex>", admin = false``. The older form with the
plaintext ``token = "..."`` is still read (its digest is computed at load time) but logged as a
warning: anyone who can read the file could then act as that user. ``clusterd token add`` writes
only digests (see :mod:`clusterd.auth.tokenfile`).

Lookups hash the presented token once and compare it with *every* entry's digest through
:func:`hmac.compare_digest`, so neither the position of a match nor a shared prefix shows in the
timing. A background task (:meth:`TokenStore.watch`) stats the file every ``tokens_reload_seconds``
in a worker thread and re-reads it when it changed, so tokens can be added or revoked without
restarting the service, and authenticating a call does no file I/O on the event loop. A broken
file keeps the previous tokens (and is logged), because locking every user out on a typo is worse
than serving a few more seconds with the old set.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from clusterd.auth.identity import Identity

log = logging.getLogger(__name__)

MIN_PLAINTEXT_LENGTH = 16
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")


class TokenFileError(ValueError):
    pass


def token_digest(token: str) -> str:
    """The hex SHA-256 of a token: what the tokens file stores instead of the token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenEntry:
    """One ``[[token]]`` table: who, the token's digest, and whether the file held the plaintext."""

    user: str
    digest: str  # hex sha256
    admin: bool = False
    plaintext: bool = False

    @property
    def identity(self) -> Identity:
        return Identity(user=self.user, admin=self.admin)

    @property
    def prefix(self) -> str:
        """Enough of the digest to name the entry in ``token list`` and ``token revoke --prefix``."""
        return self.digest[:12]


def parse_tokens(text: str, source: str = "tokens file") -> list[TokenEntry]:
    """Every entry of a tokens file. Raises TokenFileError naming the entry that is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TokenFileError(f"{source}: not valid TOML: {exc}") from exc
    entries = data.get("token", [])
    if not isinstance(entries, list):
        raise TokenFileError(f"{source}: 'token' must be an array of tables ([[token]])")
    out: list[TokenEntry] = []
    for i, entry in enumerate(entries):
        where = f"{source}: token #{i + 1}"
        if not isinstance(entry, dict):
            raise TokenFileError(f"{where} is not a table")
        user, admin = entry.get("user"), entry.get("admin", False)
        token, digest = entry.get("token"), entry.get("token_sha256")
        if not isinstance(user, str) or not user:
            raise TokenFileError(f"{where}: 'user' is required")
        if not isinstance(admin, bool):
            raise TokenFileError(f"{where}: 'admin' must be true or false")
        if (token is None) == (digest is None):
            raise TokenFileError(f"{where}: give exactly one of 'token_sha256' (preferred) or 'token'")
        if digest is not None:
            if not isinstance(digest, str) or not _HEX64.match(digest.lower()):
                raise TokenFileError(f"{where}: 'token_sha256' must be 64 hex digits")
            out.append(TokenEntry(user, digest.lower(), admin))
        else:
            if not isinstance(token, str) or len(token) < MIN_PLAINTEXT_LENGTH:
                raise TokenFileError(f"{where}: 'token' must be a string of {MIN_PLAINTEXT_LENGTH}+ characters")
            out.append(TokenEntry(user, token_digest(token), admin, plaintext=True))
    return out


class TokenStore:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._stamp: tuple[int, int, int] | None = None
        self._entries: list[tuple[bytes, Identity]] = []
        self.reload()

    def reload(self) -> None:
        """Read the file now; raises TokenFileError on a bad file (keeps the old tokens)."""
        try:
            stat = self._path.stat()
            text = self._path.read_text()
        except OSError as exc:
            raise TokenFileError(f"cannot read tokens file {self._path}: {exc.strerror}") from exc
        entries = parse_tokens(text, str(self._path))
        plain = sorted({e.user for e in entries if e.plaintext})
        if plain:
            log.warning(
                "tokens file %s holds plaintext tokens for %s: replace them with token_sha256 entries "
                "(clusterd token add)",
                self._path,
                ", ".join(plain),
            )
        if stat.st_mode & 0o077:
            log.warning(
                "tokens file %s is readable by group/others (mode %o): chmod 600 it", self._path, stat.st_mode & 0o777
            )
        self._entries = [(bytes.fromhex(e.digest), e.identity) for e in entries]
        self._stamp = _stamp(stat)

    def maybe_reload(self) -> None:
        """Re-read when the file changed: mtime, inode (atomic rewrites) or size, so that two
        edits within one timestamp tick are not missed. Blocking: call it in a worker thread."""
        try:
            stamp = _stamp(self._path.stat())
        except OSError:
            return
        if stamp != self._stamp:
            try:
                self.reload()
            except TokenFileError as exc:
                log.error("keeping previous tokens: %s", exc)
                self._stamp = stamp

    async def watch(self, stop: asyncio.Event, interval: float) -> None:
        """Until ``stop`` is set, pick up changes of the file every ``interval`` seconds, off the loop."""
        while not stop.is_set():
            await asyncio.to_thread(self.maybe_reload)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    def authenticate(self, token: str) -> Identity | None:
        """The identity for ``token``: its digest is compared with every entry in constant time.

        Pure computation on the loaded set (no I/O): safe on the event loop.
        """
        entries = self._entries
        candidate = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Identity | None = None
        for secret, ident in entries:
            if hmac.compare_digest(secret, candidate) and found is None:
                found = ident
        return found


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_mtime_ns, st.st_ino, st.st_size)
