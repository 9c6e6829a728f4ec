"""``clusterd`` command: ``serve`` runs the service; more operator commands hang here."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from clusterd.auth.cli import add_token_commands
from clusterd.auth.tokens import TokenFileError
from clusterd.check import add_check_command
from clusterd.config import ConfigError, load_config
from clusterd.observability.logs import configure_logging
from clusterd.store.migrations import MigrationError
from clusterd.web.transport import check_web_transport


def _serve(args: argparse.Namespace) -> int:
    from clusterd.server import ClusterDaemon

    overrides = {
        "listen": args.listen,
        "state_dir": args.state_dir,
        "tokens_file": args.tokens_file,
        "allow_insecure": args.allow_insecure,
    }
    try:
        config = load_config(args.config, overrides=overrides)
        check_web_transport(config)  # a dashboard another local user could impersonate: check refuses it too
        configure_logging(config.log_format, args.log_level or config.log_level)
        daemon = ClusterDaemon(config)
    except MigrationError as exc:  # the embedded store upgrades as it opens
        print(f"clusterd: {exc}", file=sys.stderr)
        return 1
    except (ConfigError, TokenFileError, ValueError) as exc:
        print(f"clusterd: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # state dir / audit log not writable
        print(f"clusterd: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(daemon.run())
    except (OSError, MigrationError) as exc:
        print(f"clusterd: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clusterd", description="gRPC job service in front of Slurm")
    parser.add_argument(
        "--log-level",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="overrides the config's log_level (default INFO)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the service")
    serve.add_argument("--config", help="TOML config file (env: CLUSTERD_CONFIG)")
    serve.add_argument("--listen", help="unix:/PATH (the default: unix:/run/clusterd/clusterd.sock) or host:port (TLS)")
    serve.add_argument("--state-dir", help="where the SQLite store lives")
    serve.add_argument("--tokens-file", help="TOML file of bearer tokens")
    serve.add_argument(
        "--allow-insecure",
        action="store_true",
        default=None,
        help="allow plaintext TCP (gRPC without TLS, http:// to a remote slurmrestd): tokens exposed",
    )
    serve.set_defaults(func=_serve)
    add_token_commands(sub)
    add_check_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "config", None) is None:
        import os

        args.config = os.environ.get("CLUSTERD_CONFIG")
    # `serve` reconfigures from its config file (JSON lines by default); the other commands talk to a person.
    logging.basicConfig(
        level=args.log_level or "INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
