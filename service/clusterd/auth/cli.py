"""``clusterd token add|revoke|list``: operator commands on the tokens file.

``add`` prints the new token once on stdout (nothing else goes to stdout, so
``TOKEN=$(clusterd token add alice)`` works) and stores only its digest. ``list`` never prints a
secret: user, admin flag and a digest prefix, which is what ``revoke --prefix`` takes.
The running service picks every change up by itself (mtime reload): no restart, no signal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clusterd.auth.tokenfile import add_token, read_entries, revoke_tokens
from clusterd.auth.tokens import TokenFileError
from clusterd.config import ConfigError, load_config


def add_token_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = sub.add_parser("token", help="manage bearer tokens (stored hashed)")
    token.add_argument("--config", help="TOML config file naming tokens_file (env: CLUSTERD_CONFIG)")
    token.add_argument("--tokens-file", help="tokens file to edit (default: tokens_file from the config)")
    actions = token.add_subparsers(dest="token_command", required=True)
    add = actions.add_parser("add", help="create a token for USER; prints it once")
    add.add_argument("user")
    add.add_argument("--admin", action="store_true", help="may act on every user's jobs")
    revoke = actions.add_parser("revoke", help="remove USER's tokens, or the one named by --prefix")
    revoke.add_argument("user", nargs="?")
    revoke.add_argument("--prefix", metavar="HASHPREFIX", help="digest prefix as shown by 'token list'")
    listing = actions.add_parser("list", help="users, admin flag and digest prefixes (never secrets)")
    for p in (add, revoke, listing):  # also accepted after the action: `clusterd token add alice --config F`
        p.add_argument("--config", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("--tokens-file", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    token.set_defaults(func=run_token_command)


def _tokens_path(args: argparse.Namespace) -> Path:
    if args.tokens_file:
        return Path(args.tokens_file)
    return Path(load_config(args.config).tokens_file)


def run_token_command(args: argparse.Namespace) -> int:
    path: Path | str = args.tokens_file or "tokens file"
    try:
        path = _tokens_path(args)
        if args.token_command == "add":
            token, entry = add_token(path, args.user, admin=args.admin)
            print(token)
            print(
                f"clusterd: added token {entry.prefix} for {entry.user}{' (admin)' if entry.admin else ''} "
                f"to {path}; it is shown only this once",
                file=sys.stderr,
            )
        elif args.token_command == "revoke":
            if (args.user is None) == (args.prefix is None):
                print("clusterd: token revoke: give USER or --prefix HASHPREFIX", file=sys.stderr)
                return 2
            gone = revoke_tokens(path, user=args.user, prefix=args.prefix)
            for e in gone:
                print(f"revoked {e.prefix} ({e.user})")
        else:
            entries = read_entries(path)
            print(f"{'USER':<20} {'ADMIN':<5} {'TOKEN_SHA256':<12}  STORED")
            for e in entries:
                stored = "PLAINTEXT (re-add it)" if e.plaintext else "hashed"
                print(f"{e.user:<20} {'yes' if e.admin else 'no':<5} {e.prefix:<12}  {stored}")
    except (TokenFileError, ConfigError) as exc:
        print(f"clusterd: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"clusterd: {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0
