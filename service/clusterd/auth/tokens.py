"""Bearer tokens from a TOML file: ``[[token]] user = "...", token = "...", admin = false``.

Lookups compare in constant time. The file is re-read when its mtime changes, so tokens can be
added or revoked without restarting the service.
"""

from __future__ import annotations

import hmac
import logging
import os
import tomllib
from pathlib import Path

from clusterd.auth.identity import Identity

log = logging.getLogger(__name__)


class TokenFileError(ValueError):
    pass


def parse_tokens(text: str, source: str = "tokens file") -> list[tuple[str, Identity]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TokenFileError(f"{source}: not valid TOML: {exc}") from exc
    entries = data.get("token", [])
    if not isinstance(entries, list):
        raise TokenFileError(f"{source}: 'token' must be an array of tables ([[token]])")
    out: list[tuple[str, Identity]] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise TokenFileError(f"{source}: token #{i + 1} is not a table")
        token, user, admin = entry.get("token"), entry.get("user"), entry.get("admin", False)
        if not isinstance(token, str) or len(token) < 16:
            raise TokenFileError(f"{source}: token #{i + 1}: 'token' must be a string of 16+ characters")
        if not isinstance(user, str) or not user:
            raise TokenFileError(f"{source}: token #{i + 1}: 'user' is required")
        if not isinstance(admin, bool):
            raise TokenFileError(f"{source}: token #{i + 1}: 'admin' must be true or false")
        out.append((token, Identity(user=user, admin=admin)))
    return out


class TokenStore:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._mtime: float | None = None
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
        self._entries = [(tok.encode(), ident) for tok, ident in entries]
        self._mtime = stat.st_mtime

    def _maybe_reload(self) -> None:
        try:
            mtime = self._path.stat().st_mtime
        except OSError:
            return
        if mtime != self._mtime:
            try:
                self.reload()
            except TokenFileError as exc:
                log.error("keeping previous tokens: %s", exc)
                self._mtime = mtime

    def authenticate(self, token: str) -> Identity | None:
        """The identity for ``token``, comparing against every entry in constant time."""
        self._maybe_reload()
        candidate = token.encode()
        found: Identity | None = None
        for secret, ident in self._entries:
            if hmac.compare_digest(secret, candidate):
                found = ident
        return found
