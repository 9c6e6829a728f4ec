"""The caller's identity, carried in a context variable for the duration of one RPC."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from clusterd.errors import PermissionDenied, Unauthenticated


@dataclass(frozen=True)
class Identity:
    user: str
    admin: bool = False

    def check_owner(self, owner: str, what: str) -> None:
        """Users act on their own jobs only; admins on all."""
        if not self.admin and owner != self.user:
            raise PermissionDenied(f"{what} belongs to another user")


_current: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("clusterd_identity", default=None)


def current_identity() -> Identity:
    ident = _current.get()
    if ident is None:
        raise Unauthenticated("no authenticated caller")
    return ident


def peek_identity() -> Identity | None:
    """The caller, or None outside an authenticated call (for log lines, which must not raise)."""
    return _current.get()


def set_identity(ident: Identity | None) -> contextvars.Token[Identity | None]:
    return _current.set(ident)


def reset_identity(token: contextvars.Token[Identity | None]) -> None:
    _current.reset(token)
