"""Options every command shares (--addr, --ca/--cert/--key, --timeout, --json) and the client seam.

There is no --token: a token in argv is readable by every local user (``ps``, /proc/PID/cmdline).
The token comes from CLUSTERCTL_TOKEN or CLUSTERCTL_TOKEN_FILE (clusterctl.client.resolve_token);
``--token`` is refused with that explanation.

The connection options are accepted both before and after the command name
(``clusterctl --addr X list`` and ``clusterctl list --addr X``): the top-level copies carry the
defaults, the per-command copies use ``SUPPRESS`` so they only override when given.
Commands get their client from ``args.make_client()``, which ``main`` sets; tests swap in a fake
there instead of patching gRPC.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from clusterctl import __version__
from clusterctl.cli.values import argtype, duration_seconds, hostlist, positive_int, positive_seconds
from clusterctl.client import DEFAULT_ADDR, DEFAULT_TIMEOUT, ClusterClient, split_addrs
from clusterctl.errors import ServiceError
from clusterctl.failover import resolve_retry_seconds
from clusterctl.v1 import cluster_pb2

ClientFactory = Callable[[argparse.Namespace], Any]
"""Builds the client for one command from the parsed options (a ClusterClient or a fake)."""


class CliParser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing usage and exiting, and takes no abbreviations.

    ``main`` turns the exception into the one-line ``clusterctl: error: ...`` and exit code 2,
    and tests can call ``main([...])`` without catching ``SystemExit``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # sbatch takes no abbreviations here: `--ntasks 4` must never become `--ntasks-per-node 4`.
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ArgumentError(message)


class ArgumentError(Exception):
    """A command line argparse could not accept (exit code 2)."""


class _RefuseToken(argparse.Action):
    """``--token`` (the full name only: abbreviations are off) ends the run with the reason."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        raise ArgumentError(
            "--token is not accepted: a token on the command line is visible to every local user "
            "(ps); set CLUSTERCTL_TOKEN or CLUSTERCTL_TOKEN_FILE (a file only you can read)"
        )


def add_connection_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """--addr/--timeout/TLS files; ``top_level`` decides whether this copy supplies the defaults."""
    group = parser.add_argument_group("connection")
    suppress: dict[str, Any] = {} if top_level else {"default": argparse.SUPPRESS}
    group.add_argument(
        "--addr",
        metavar="ADDR",
        help="clusterd address: unix:/PATH or HOST:PORT, or a comma-separated list of replicas "
        f"(default: $CLUSTERCTL_ADDR or {DEFAULT_ADDR})",
        **({"default": None} | suppress),
    )
    group.add_argument("--token", nargs="?", action=_RefuseToken, help=argparse.SUPPRESS)
    for flag, env, what in (
        ("--ca", "CLUSTERCTL_CA", "CA certificate (PEM) that signed clusterd's: turns on TLS"),
        ("--cert", "CLUSTERCTL_CERT", "client certificate (PEM) for mTLS"),
        ("--key", "CLUSTERCTL_KEY", "client private key (PEM) for mTLS"),
    ):
        group.add_argument(flag, metavar="FILE", help=f"{what} (default: ${env})", **({"default": None} | suppress))
    group.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=argtype(positive_seconds),
        help=f"deadline for each call (default: {DEFAULT_TIMEOUT:g})",
        **({"default": DEFAULT_TIMEOUT} | suppress),
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """--json: machine-readable output with proto field names, for scripts."""
    parser.add_argument("--json", action="store_true", help="print JSON (proto field names) instead of a human view")


def command_parent() -> argparse.ArgumentParser:
    """A parent parser giving a subcommand the connection options."""
    parent = CliParser(add_help=False)
    add_connection_options(parent, top_level=False)
    return parent


def default_client_factory(args: argparse.Namespace) -> ClusterClient:
    """The real gRPC client, configured from the options or the CLUSTERCTL_* environment.

    Failing over between replicas lasts at most --timeout (or CLUSTERCTL_RETRY_SECONDS when shorter):
    a command never waits much longer than the deadline it was given.
    """
    return ClusterClient(
        addr=args.addr,
        timeout=args.timeout,
        ca=getattr(args, "ca", None),
        cert=getattr(args, "cert", None),
        key=getattr(args, "key", None),
        retry_seconds=min(resolve_retry_seconds(), args.timeout),
    )


def token_given() -> bool:
    """Whether any token will be sent: used to explain UNAUTHENTICATED answers."""
    return bool(os.environ.get("CLUSTERCTL_TOKEN") or os.environ.get("CLUSTERCTL_TOKEN_FILE"))


_POLICIES = {
    "pack": cluster_pb2.PLACEMENT_POLICY_PACK,
    "any": cluster_pb2.PLACEMENT_POLICY_ANY,
    "exact": cluster_pb2.PLACEMENT_POLICY_EXACT,
}


def add_placement_options(parser: argparse.ArgumentParser) -> None:
    """Placement flags shared by ``submit`` and ``plan`` (a plan is a dry run of a submit)."""
    group = parser.add_argument_group("placement")
    group.add_argument(
        "--placement",
        choices=sorted(_POLICIES),
        help="pack: one leaf switch (waiting up to --max-wait); any: no switch constraint; "
        "exact: exactly --switches leaf switches (default: the server's, pack)",
    )
    group.add_argument(
        "--max-wait", metavar="DURATION", type=argtype(duration_seconds), help="pack: how long to wait for one switch"
    )
    group.add_argument(
        "--switches",
        metavar="N",
        type=argtype(positive_int),
        help="number of leaf switches (implies --placement exact)",
    )
    group.add_argument(
        "-x",
        "--exclude",
        metavar="HOSTLIST",
        type=argtype(hostlist),
        action="append",
        default=[],
        help="never place on these nodes (node[1-3],node7)",
    )
    group.add_argument(
        "-w",
        "--nodelist",
        metavar="HOSTLIST",
        type=argtype(hostlist),
        action="append",
        default=[],
        help="place exactly on these nodes",
    )
    group.add_argument(
        "-C",
        "--constraint",
        metavar="FEATURE",
        action="append",
        default=[],
        help="required node features: 'a&b' both (submit: sbatch's syntax, 'a|b' too); repeated -C are ANDed",
    )


def placement_from_args(
    args: argparse.Namespace, *, with_constraints: bool = True
) -> cluster_pb2.PlacementPreference | None:
    """The PlacementPreference the flags ask for, or None when none was given (server default).

    ``submit`` passes ``with_constraints=False``: there -C goes unsplit into ``spec.constraint``
    (sbatch syntax, ``|`` included); ``plan`` still asks with the ANDed feature list.
    """
    pref = cluster_pb2.PlacementPreference(
        exclude_nodes=[name for names in args.exclude for name in names],
        nodelist=[name for names in args.nodelist for name in names],
    )
    if with_constraints:
        pref.constraints.extend(c.strip() for item in args.constraint for c in item.split("&") if c.strip())
    if args.placement:
        pref.policy = _POLICIES[args.placement]
    elif args.switches is not None:
        pref.policy = cluster_pb2.PLACEMENT_POLICY_EXACT
    if args.max_wait is not None:
        pref.max_wait_seconds = args.max_wait
    if args.switches is not None:
        pref.switch_count = args.switches
    return pref if pref.ByteSize() else None


def describe_service_error(exc: ServiceError, args: argparse.Namespace) -> str:
    """The server's message, plus a hint where the fix is on the caller's side (the token)."""
    message = exc.message or exc.code_name
    if exc.code_name == "UNAUTHENTICATED":
        if token_given():
            return f"{message} (the token was rejected: check CLUSTERCTL_TOKEN or CLUSTERCTL_TOKEN_FILE)"
        return f"{message} (no token given: set CLUSTERCTL_TOKEN or CLUSTERCTL_TOKEN_FILE)"
    if exc.code_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED") and "clusterd" not in message:
        addr = ", ".join(exc.addresses or split_addrs(args.addr))  # every replica tried, when it failed over
        return f"cannot reach clusterd at {addr}: {message} (check CLUSTERCTL_ADDR or --addr)"
    if exc.code_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        return f"{message} (check CLUSTERCTL_ADDR or --addr)"
    if exc.server_too_old:
        command = getattr(args, "command", None) or "this command"
        return (
            f"clusterd does not know the call `clusterctl {command}` makes ({message}): the server is older "
            f"than this client (clusterctl {__version__}); upgrade clusterd or use its release's clusterctl"
        )
    return message
