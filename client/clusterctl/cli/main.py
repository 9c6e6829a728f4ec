"""``clusterctl`` entry point: build the parser, dispatch, and turn every failure into one line.

Exit codes: 0 success; 1 the server or the connection failed (UNAVAILABLE, PERMISSION_DENIED,
NOT_FOUND, UNAUTHENTICATED, ...); 2 bad input (flags, values, an unreadable script, or the
server's INVALID_ARGUMENT); 130 interrupted. Errors are one ``clusterctl: error: ...`` line on
stderr, never a traceback (set CLUSTERCTL_DEBUG=1 to get one for a bug report).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from clusterctl.cli import cluster, goodput, jobs, submit, views
from clusterctl.cli.options import (
    ArgumentError,
    ClientFactory,
    CliParser,
    add_connection_options,
    default_client_factory,
    describe_service_error,
)
from clusterctl.errors import ClusterctlError, ServiceError, UsageError

PROG = "clusterctl"


def build_parser() -> CliParser:
    """The full parser; ``checkpoints`` is added only when its module is installed."""
    parser = CliParser(
        prog=PROG,
        description="Submit and follow Slurm jobs through clusterd "
        "(CLUSTERCTL_ADDR; token from CLUSTERCTL_TOKEN or CLUSTERCTL_TOKEN_FILE, never the command line).",
    )
    add_connection_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CliParser)
    sub.required = True
    submit.register(sub)
    jobs.register(sub)
    views.register(sub)
    cluster.register(sub)
    goodput.register(sub)
    _register_checkpoints(sub)
    return parser


def _register_checkpoints(sub: Any) -> None:
    """Wire ``checkpoints`` in when that module exists; the CLI must work without it.

    Only a missing module is tolerated: an ImportError raised from inside it is a real bug and
    is not hidden.
    """
    try:
        module = importlib.import_module("clusterctl.cli.checkpoints")
    except ModuleNotFoundError as exc:
        if exc.name in ("clusterctl.cli.checkpoints",):
            return
        raise
    module.register(sub)


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``submit ... -- CMD ARGS`` so the command's own flags never reach argparse."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    if "submit" not in argv[:cut]:
        return argv, []
    return argv[:cut], argv[cut + 1 :]


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None, *, client_factory: ClientFactory | None = None) -> int:
    """Run one command and return its exit code (the console script passes it to sys.exit).

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).
        client_factory: builds the client from the parsed options; tests pass a fake here.
    """
    args_list, command_argv = _split_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args: argparse.Namespace | None = None
    try:
        args = parser.parse_args(args_list)
        if command_argv:
            if args.command != "submit":
                raise ArgumentError("'-- COMMAND' is only accepted by submit")
            args.command_argv = command_argv
        factory = client_factory or default_client_factory
        namespace = args
        args.make_client = lambda: factory(namespace)
        return int(args.func(args))
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else 0
    except ArgumentError as exc:
        return _fail(str(exc), 2)
    except UsageError as exc:
        return _fail(str(exc), 2)
    except ServiceError as exc:
        message = describe_service_error(exc, args) if args is not None else exc.message
        if exc.request_id and not exc.is_bad_input and not exc.server_too_old:
            message += f" (request id {exc.request_id})"
        return _fail(message, 2 if exc.is_bad_input or exc.server_too_old else 1)
    except ClusterctlError as exc:
        return _fail(str(exc), 1)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `clusterctl list --json | head`: the reader left; say nothing more.
        _silence_stdout()
        return 1
    except Exception as exc:
        if os.environ.get("CLUSTERCTL_DEBUG"):
            raise
        return _fail(f"internal error: {type(exc).__name__}: {exc} (CLUSTERCTL_DEBUG=1 shows the traceback)", 1)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
