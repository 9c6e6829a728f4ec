"""Cluster commands: ``topology`` (switch tree), ``nodes`` (table), ``plan`` (placement dry run)."""

from __future__ import annotations

import argparse
from typing import Any

from clusterctl.cli import render
from clusterctl.cli.options import add_json_option, add_placement_options, command_parent, placement_from_args
from clusterctl.cli.values import argtype, positive_int
from clusterctl.v1 import cluster_pb2


def register(subparsers: Any) -> None:
    """Add the cluster commands to the top-level parser."""
    parent = command_parent()

    p = subparsers.add_parser("topology", parents=[parent], help="show the switch tree with free GPUs and nodes")
    p.add_argument("--no-nodes", action="store_true", help="switches only")
    add_json_option(p)
    p.set_defaults(func=topology)

    p = subparsers.add_parser("nodes", parents=[parent], help="list nodes with state and free resources")
    p.add_argument("-p", "--partition", metavar="NAME", default="", help="only nodes of this partition")
    add_json_option(p)
    p.set_defaults(func=nodes)

    p = subparsers.add_parser(
        "plan",
        parents=[parent],
        help="dry run: where would a job go now, and why",
        description="Ask the planner where a job of this shape would be placed, without submitting.",
    )
    p.add_argument("-N", "--nodes", metavar="N", type=argtype(positive_int), default=1)
    p.add_argument("--gpus-per-node", metavar="N", type=argtype(positive_int))
    p.add_argument("--cpus-per-node", metavar="N", type=argtype(positive_int))
    p.add_argument("-p", "--partition", metavar="NAME", default="")
    add_placement_options(p)
    add_json_option(p)
    p.set_defaults(func=plan)


def topology(args: argparse.Namespace) -> int:
    topo = args.make_client().topology()
    if args.json:
        render.print_json(render.to_dict(topo))
        return 0
    if args.no_nodes:
        stripped = cluster_pb2.Topology()
        stripped.CopyFrom(topo)
        for sw in stripped.switches:
            del sw.nodes[:]
        del stripped.nodes[:]
        topo = stripped
    render.console().print(render.topology_tree(topo))
    return 0


def nodes(args: argparse.Namespace) -> int:
    found = args.make_client().nodes(partition=args.partition)
    if args.json:
        render.print_json({"nodes": [render.to_dict(n) for n in found]})
    elif not found:
        render.console().print("No nodes." + (f" (partition {args.partition!r})" if args.partition else ""))
    else:
        render.console().print(render.nodes_table(found))
    return 0


def plan_request(args: argparse.Namespace) -> cluster_pb2.PlanPlacementRequest:
    """The PlanPlacementRequest for the flags: the same placement flags as ``submit``."""
    request = cluster_pb2.PlanPlacementRequest(nodes=args.nodes, partition=args.partition)
    if args.gpus_per_node is not None:
        request.gpus_per_node = args.gpus_per_node
    if args.cpus_per_node is not None:
        request.cpus_per_node = args.cpus_per_node
    placement = placement_from_args(args)
    if placement is not None:
        request.placement.CopyFrom(placement)
    return request


def plan(args: argparse.Namespace) -> int:
    """Exit 0 whether or not the request fits: an infeasible plan is an answer, not an error."""
    placement = args.make_client().plan(plan_request(args))
    if args.json:
        render.print_json(render.to_dict(placement))
    else:
        render.console().print(render.placement(placement))
    return 0
