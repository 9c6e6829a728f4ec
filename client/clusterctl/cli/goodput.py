"""``goodput JOB``: where a job's wall time went, and the checkpoint interval clusterd advises it.

``--json`` prints ``{"job_id", "ettr", "wall_seconds", "breakdown": {part: seconds},
"checkpoint_interval_seconds"}``; the breakdown's parts add up to ``wall_seconds``.
"""

from __future__ import annotations

import argparse
from typing import Any

from clusterctl.cli import render
from clusterctl.cli.options import add_json_option, command_parent
from clusterctl.v1 import jobs_pb2

# The breakdown's parts in the order they are shown (the proto's field order).
PARTS = tuple(f.name for f in jobs_pb2.GoodputBreakdown.DESCRIPTOR.fields)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "goodput",
        parents=[command_parent()],
        help="a job's effective training time and where the rest went",
        description="The share of a job's wall time spent on training steps that were kept (ETTR), "
        "and the rest by cause: queue wait, start and restore, checkpoint stalls, failure "
        "detection, restart, and lost (redone) work. The parts add up to the wall time.",
    )
    p.add_argument("job_id", metavar="JOB_ID")
    add_json_option(p)
    p.set_defaults(func=goodput)


def as_dict(msg: jobs_pb2.GetGoodputResponse) -> dict[str, Any]:
    advised = msg.checkpoint_interval.ToNanoseconds() / 1e9 if msg.HasField("checkpoint_interval") else None
    return {
        "job_id": msg.job_id,
        "ettr": msg.ettr,
        "wall_seconds": msg.wall_seconds,
        "breakdown": {name: getattr(msg.breakdown, name) for name in PARTS},
        "checkpoint_interval_seconds": advised,
    }


def goodput(args: argparse.Namespace) -> int:
    data = as_dict(args.make_client().goodput(args.job_id))
    if args.json:
        render.print_json(data)
        return 0
    wall = data["wall_seconds"]
    out = render.console()
    out.print(f"job {data['job_id']}: ETTR {data['ettr']:.1%} of {render.slurm_duration(round(wall))} wall time")
    for name in PARTS:
        seconds = data["breakdown"][name]
        share = seconds / wall if wall > 0 else 0.0
        out.print(f"  {name.replace('_', ' '):<17} {render.slurm_duration(round(seconds)):>11}  {share:6.1%}")
    if data["checkpoint_interval_seconds"] is not None:
        out.print(f"advised checkpoint interval: {render.slurm_duration(round(data['checkpoint_interval_seconds']))}")
    return 0
