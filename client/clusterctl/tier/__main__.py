"""``python -m clusterctl.tier``: run one node's memory tier for one job (the secret comes from the env).

The secret is read from ``CLUSTERCTL_TIER_SECRET`` (hex), never from argv, which every user sees.
Prints ``listening HOST:PORT`` once it accepts connections; exits on SIGTERM/SIGINT, and on SIGUSR1,
which srun forwards to its tasks (on SIGTERM srun kills them) when a job's batch script stops its tiers.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

from .client import parse_address
from .process import ENV_SECRET
from .server import TierServer, TierSettings

log = logging.getLogger(__name__)


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m clusterctl.tier", description=__doc__)
    p.add_argument("--listen", default="127.0.0.1:0", help="host:port (port 0: any)")
    p.add_argument("--job", required=True, help="the job id this tier serves")
    p.add_argument("--peers", default="", help="the job's other tiers, host:port, comma-separated, in placement order")
    p.add_argument("--replicas", type=int, default=1, help="peer copies before a put is answered (default 1)")
    p.add_argument("--cap-bytes", type=int, default=8 << 30, help="memory cap of this tier (default 8 GiB)")
    p.add_argument("--nice", type=int, default=10, help="nice increment: the tier works in the trainer's idle time")
    p.add_argument("--exit-with-parent", action="store_true", help="exit when the process that started it ends")
    p.add_argument("--handoff-delay", type=float, default=30.0, help="seconds before a replica holder uploads")
    args = p.parse_args(argv)
    if args.replicas < 0 or args.cap_bytes < 1 or args.handoff_delay < 0:
        p.error("--replicas and --handoff-delay must be >= 0, --cap-bytes >= 1")
    try:
        parse_address(args.listen)
    except ValueError as exc:
        p.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    secret = take_secret()
    if secret is None:
        return 2
    host, port = parse_address(args.listen)
    settings = TierSettings(
        job=args.job,
        secret=secret,
        peers=tuple(p for p in args.peers.split(",") if p),
        replicas=args.replicas,
        cap_bytes=args.cap_bytes,
        handoff_delay=args.handoff_delay,
    )
    return serve(settings, host, [port], nice=args.nice, exit_with_parent=args.exit_with_parent)


def take_secret() -> bytes | None:
    """The job's secret, taken out of this process's environment (its children never see it);
    None, with the reason on stderr, when it is missing or malformed."""
    try:
        secret = bytes.fromhex(os.environ.pop(ENV_SECRET, ""))
    except ValueError:
        secret = b""
    if len(secret) < 16:
        print(f"error: {ENV_SECRET} must hold the job's secret (>= 16 bytes, hex)", file=sys.stderr)
        return None
    return secret


def serve(
    settings: TierSettings, host: str, ports: Sequence[int], *, nice: int = 10, exit_with_parent: bool = False
) -> int:
    """Run a tier on the first of ``ports`` free on ``host`` until a signal (or its parent's end);
    a port another process holds is passed over, any other failure to listen ends it (exit 1)."""
    if nice > 0:
        os.nice(nice)
    logging.basicConfig(level=logging.WARNING, format="tier %(levelname)s %(message)s")
    server: TierServer | None = None
    for port in ports:
        try:
            server = TierServer(settings, host=host, port=port)
            break
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:  # not a taken port: the next would fail the same way
                print(f"error: the memory tier cannot listen on {host}:{port}: {exc}", file=sys.stderr)
                return 1
            log.info("memory tier: port %d on %s taken; trying the next", port, host)
    if server is None:
        print(f"error: no free port for the memory tier on {host} (tried {len(ports)})", file=sys.stderr)
        return 1
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, lambda *_: done.set())
    parent = os.getppid()
    server.start()
    print(f"listening {server.address}", flush=True)
    while not done.wait(1.0):
        if exit_with_parent and os.getppid() != parent:
            break  # the trainer that owned this tier is gone (even by SIGKILL): its memory goes too
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
