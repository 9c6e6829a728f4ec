"""``clusterctl checkpoints list|latest|verify|gc|show|export URI``: inspect, verify, clean, export.

Thin: parse flags, call the checkpoint library, render. Results go to stdout (a rich table, or
JSON with ``--json``); progress bars and errors go to stderr. Exit codes: 0 success, 1 storage
error, 2 bad input (bad URI, unknown step), 3 ``verify`` found a corrupt step. Errors are one
line, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from ..digits import is_digits
from .values import INT64_MAX, argtype, seconds, step_number

EXIT_OK, EXIT_STORAGE, EXIT_USAGE, EXIT_CORRUPT = 0, 1, 2, 3
DEFAULT_GRACE = 6 * 3600.0
URI_WAIT = 10.0  # list, with the job's memory tiers: how long the URI may take to answer

Handler = Callable[[argparse.Namespace], int]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``checkpoints`` command (``list``, ``verify``, ``gc``) to a CLI's subparsers."""
    parser = subparsers.add_parser(
        "checkpoints",
        help="list, verify and garbage-collect checkpoints",
        description="Inspect a checkpoint location (s3://bucket/prefix, file:///dir or a path). "
        "S3 settings come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION.",
        epilog="exit codes: 0 ok, 1 storage error, 2 bad input, 3 verification found corruption",
    )
    sub = parser.add_subparsers(
        dest="checkpoints_command", metavar="{list,latest,verify,gc,show,export}", required=True
    )

    p = sub.add_parser("list", help="committed steps with world size, size and time")
    p.add_argument("uri")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_guard(cmd_list))

    p = sub.add_parser("latest", help="print the newest committed step (-1 when none): one LIST, for scripts")
    p.add_argument("uri")
    p.set_defaults(func=_guard(cmd_latest))

    p = sub.add_parser("verify", help="read every shard and check every checksum")
    p.add_argument("uri")
    p.add_argument(
        "--step", type=argtype(step_number), default=None, help="verify only this step (default: every committed step)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_guard(cmd_verify))

    p = sub.add_parser("gc", help="delete uncommitted objects and orphaned multipart uploads")
    p.add_argument("uri")
    p.add_argument(
        "--grace",
        type=argtype(seconds),
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help=f"keep anything younger than this (default {DEFAULT_GRACE:.0f}); must exceed the longest save",
    )
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, delete nothing")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_guard(cmd_gc))

    p = sub.add_parser(
        "show",
        help="each tensor leaf of a step: layout, dtype, global shape, bytes",
        description="URI and STEP may come in either order.",
    )
    p.add_argument("uri")
    p.add_argument("step")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_guard(cmd_show))

    p = sub.add_parser(
        "export",
        help="write a step's full (consolidated) tensors as safetensors files",
        description="Reads every shard a leaf needs, verifying checksums, and writes one "
        "<top-level key>.safetensors per key (or list index) into DIR; characters "
        "other than letters, digits, '_', '-', '.' are %-escaped. "
        "Rank-local leaves: rank 0's.",
    )
    p.add_argument("uri")
    p.add_argument("step")
    p.add_argument("dir")
    p.set_defaults(func=_guard(cmd_export))


def _err(message: str) -> None:
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {message}", markup=True)


def _guard(handler: Handler) -> Handler:
    """Map library errors to one-line messages and exit codes."""
    from ..checkpoint import CheckpointError
    from ..storage import InvalidKeyError, InvalidURIError, StorageError

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (InvalidURIError, InvalidKeyError, ValueError) as exc:
            _err(str(exc))
            return EXIT_USAGE
        except (StorageError, CheckpointError) as exc:
            _err(str(exc))
            return EXIT_STORAGE
        except KeyboardInterrupt:
            _err("interrupted")
            return 130
        except Exception as exc:  # never a traceback at the terminal
            _err(f"unexpected {type(exc).__name__}: {exc}")
            return EXIT_STORAGE

    run.__name__ = handler.__name__
    run.__doc__ = handler.__doc__
    return run


def _open(uri: str) -> Any:
    from ..checkpoint.config import CheckpointConfig
    from ..storage import open_storage

    config = CheckpointConfig()
    return open_storage(uri, s3=config.s3_options(), posix=config.posix_options())


@contextlib.contextmanager
def _progress(total: int, label: str) -> Iterator[Callable[[int], None]]:
    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task(label, total=total)
        yield lambda n: progress.advance(task, n)


def _when(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ") if ts else "-"


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)


def _tier_copies(uri: str) -> tuple[dict[int, list[str]], Any]:
    """With the job's tier in the environment: the tiers holding each committed step, and a
    storage reading them (None without a tier)."""
    from ..tier import TierClient, TierError, TierStorage, endpoints_from_env

    endpoints = endpoints_from_env()
    if endpoints is None:
        return {}, None
    clients = [
        TierClient(a, secret=endpoints.secret, job=endpoints.job, timeout=10.0)
        for a in (endpoints.address, *endpoints.peers)
    ]
    held: dict[int, list[str]] = {}
    for client in clients:
        try:
            steps = client.status(uri)["steps"]
        except TierError as exc:
            _err(f"memory tier at {client.address} not asked: {exc}")
            continue
        for step, info in steps.items():
            if info.get("committed"):
                held.setdefault(int(step), []).append(client.address)
    return held, TierStorage(clients[0], clients[1:], uri)


def _durable(storage: Any, uri: str, wait: float | None) -> set[int] | None:
    """The committed steps on the URI; None, with a warning, when ``wait`` seconds pass first (the
    job's tiers hold steps and its URI is down: list shows them rather than hang)."""
    from ..checkpoint.gc import list_committed

    if wait is None:
        return set(list_committed(storage))
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["steps"] = set(list_committed(storage))
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)  # a hung LIST must not hold the exit
    thread.start()
    thread.join(wait)
    if "error" in box:
        raise box["error"]
    if "steps" not in box:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[bold yellow]warning:[/] {uri} did not answer in {wait:g} s: the steps in memory are shown, "
            "whether they are durable is unknown",
            markup=True,
        )
        return None
    return set(box["steps"])


def cmd_list(args: argparse.Namespace) -> int:
    """Print the committed steps (one LIST, plus one small GET per step for its marker) and where
    each lives: on the URI, and in which memory tiers when the job's tier is in the environment
    (then a URI that does not answer in URI_WAIT seconds is reported, not waited for)."""
    from ..checkpoint.commit import read_marker_or_none

    storage = _open(args.uri)
    tiers = None
    try:
        held, tiers = _tier_copies(args.uri)
        known = _durable(storage, args.uri, URI_WAIT if tiers is not None else None)
        durable = known or set()
        rows: list[dict[str, Any]] = []
        for step in sorted(durable | set(held)):
            marker = read_marker_or_none(storage if step in durable else tiers, step)
            rows.append(
                {
                    "step": step,
                    "valid_marker": marker is not None,
                    "world_size": marker.world_size if marker else None,
                    "bytes": marker.total_bytes if marker else None,
                    "created": marker.created if marker else None,
                    "attempt": marker.attempt if marker else None,
                    "durable": step in durable if known is not None else None,
                    "memory": held.get(step, []),
                }
            )
    finally:
        storage.close()
        if tiers is not None:
            tiers.close()
    if args.json:
        print(json.dumps({"uri": args.uri, "steps": rows}, indent=2))
        return EXIT_OK
    if not rows:
        print(f"no committed checkpoints under {args.uri}")
        return EXIT_OK
    table = Table(title=f"committed checkpoints under {args.uri}")
    for col in ("step", "ranks", "size", "committed at (UTC)", "attempt", "where"):
        table.add_column(col, justify="right" if col in ("step", "ranks", "size") else "left")
    for r in rows:
        uri = {True: ["uri"], False: [], None: ["uri unknown"]}[r["durable"]]
        where = ", ".join(uri + [f"memory {a}" for a in r["memory"]])
        if not r["valid_marker"]:
            table.add_row(str(r["step"]), "-", "-", "[red]invalid marker[/]", "-", where)
        else:
            table.add_row(
                str(r["step"]), str(r["world_size"]), _size(r["bytes"]), _when(r["created"]), r["attempt"], where
            )
    Console().print(table)
    return EXIT_OK


def cmd_latest(args: argparse.Namespace) -> int:
    """Print the newest committed step; job scripts export it as CLUSTERCTL_RESUME_STEP."""
    from ..checkpoint.gc import latest_committed

    storage = _open(args.uri)
    try:
        step = latest_committed(storage)
    finally:
        storage.close()
    print(-1 if step is None else step)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """Verify one or every committed step; exit 3 if any is corrupt."""
    from ..checkpoint.commit import read_marker_or_none
    from ..checkpoint.gc import list_committed
    from ..checkpoint.restore import verify_step

    storage = _open(args.uri)
    try:
        committed = list_committed(storage)
        if args.step is not None and args.step not in committed:
            _err(f"step {args.step} is not committed under {args.uri} (committed: {committed[-10:]})")
            return EXIT_USAGE
        steps = [args.step] if args.step is not None else committed[::-1]
        markers = {s: read_marker_or_none(storage, s) for s in steps}
        total = sum(m.total_bytes for m in markers.values() if m is not None)
        reports = []
        with _progress(total, "verifying") as advance:
            for step in steps:
                reports.append(verify_step(storage, step, progress=advance))
    finally:
        storage.close()
    bad = [r for r in reports if not r.ok]
    if args.json:
        print(
            json.dumps(
                {
                    "uri": args.uri,
                    "steps": [
                        {
                            "step": r.step,
                            "ok": r.ok,
                            "world_size": r.world_size,
                            "bytes": r.bytes,
                            "problems": r.problems,
                        }
                        for r in reports
                    ],
                },
                indent=2,
            )
        )
    else:
        if not reports:
            print(f"no committed checkpoints under {args.uri}")
        for r in reports:
            if r.ok:
                print(f"step {r.step}: ok ({r.world_size} shard(s), {_size(r.bytes)})")
            else:
                print(f"step {r.step}: CORRUPT: " + "; ".join(r.problems))
    return EXIT_CORRUPT if bad else EXIT_OK


def _uri_and_step(args: argparse.Namespace) -> tuple[str, int]:
    """``URI STEP`` or ``STEP URI``; the step must be committed.

    Raises:
        ValueError: neither argument is a step number (exit 2).
    """
    uri, step = args.uri, args.step
    if is_digits(uri) and not is_digits(step):
        uri, step = step, uri
    try:
        return uri, step_number(step)
    except ValueError:
        raise ValueError(f"STEP must be a non-negative integer up to {INT64_MAX}, got {step!r}") from None


def _committed_step(storage: Any, uri: str, step: int) -> None:
    from ..checkpoint.gc import list_committed

    committed = list_committed(storage)
    if step not in committed:
        raise ValueError(f"step {step} is not committed under {uri} (committed: {committed[-10:]})")


def cmd_show(args: argparse.Namespace) -> int:
    """Print each tensor leaf of a step (reads the manifests, not the shards)."""
    from ..checkpoint.contents import describe_step

    uri, step = _uri_and_step(args)
    storage = _open(uri)
    try:
        _committed_step(storage, uri, step)
        leaves = describe_step(storage, step)
    finally:
        storage.close()
    if args.json:
        print(
            json.dumps(
                {
                    "uri": uri,
                    "step": step,
                    "leaves": [
                        {
                            "key": x.path,
                            "layout": x.layout,
                            "dtype": x.dtype,
                            "global_shape": x.shape,
                            "bytes": x.bytes,
                            "ranks": x.ranks,
                        }
                        for x in leaves
                    ],
                },
                indent=2,
            )
        )
        return EXIT_OK
    table = Table(title=f"step {step} under {uri}")
    for col in ("key", "layout", "dtype", "global shape", "bytes"):
        table.add_column(col, justify="right" if col == "bytes" else "left")
    for x in leaves:
        table.add_row(x.path, x.layout, x.dtype, str(x.shape), _size(x.bytes))
    Console().print(table)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    """Write full tensors as safetensors files (checksums verified while reading); exit 3 if corrupt."""
    from ..checkpoint import CorruptCheckpointError
    from ..checkpoint.contents import export_step

    uri, step = _uri_and_step(args)
    if os.path.exists(args.dir) and not os.path.isdir(args.dir):
        raise ValueError(f"DIR {args.dir!r} exists and is not a directory")
    storage = _open(uri)
    try:
        _committed_step(storage, uri, step)
        try:
            files = export_step(storage, step, args.dir)
        except CorruptCheckpointError as exc:
            _err(str(exc))
            return EXIT_CORRUPT
    finally:
        storage.close()
    for path in files:
        print(path)
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    """Delete garbage older than --grace (or list it with --dry-run)."""
    from ..checkpoint.gc import collect_garbage, find_garbage

    storage = _open(args.uri)
    try:
        if args.dry_run:
            report = find_garbage(storage, grace=args.grace)
        else:
            found = find_garbage(storage, grace=args.grace)
            with _progress(len(found.objects) + len(found.uploads), "collecting") as advance:
                done = [0]

                def tick(n: int, _total: int) -> None:
                    advance(n - done[0])
                    done[0] = n

                report = collect_garbage(storage, grace=args.grace, progress=tick)
    finally:
        storage.close()
    verb = "would remove" if args.dry_run else "removed"
    if args.json:
        print(
            json.dumps(
                {
                    "uri": args.uri,
                    "dry_run": args.dry_run,
                    "objects": [o.key for o in report.objects],
                    "bytes": report.bytes,
                    "incomplete_uploads": [u.key for u in report.uploads],
                    "kept_young": report.young,
                },
                indent=2,
            )
        )
    else:
        if args.dry_run:
            for o in report.objects:
                print(f"{o.key}\t{_size(o.size)}")
            for u in report.uploads:
                print(f"{u.key}\t(incomplete upload)")
        print(
            f"{verb} {len(report.objects)} object(s) ({_size(report.bytes)}) and {len(report.uploads)} "
            f"incomplete upload(s); kept {report.young} younger than {args.grace:.0f}s"
        )
    return EXIT_OK


if __name__ == "__main__":  # ``python -m clusterctl.cli.checkpoints ...`` before the main CLI exists
    _parser = argparse.ArgumentParser(prog="clusterctl")
    register(_parser.add_subparsers(dest="command", required=True))
    _args = _parser.parse_args()
    sys.exit(_args.func(_args))
