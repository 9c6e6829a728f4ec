"""Placement benchmark: clusterd's planner vs a simulation of Slurm's topology/tree best fit.

A 1,024-node, 3-level fat tree (32 leaves x 32 nodes, 4 spines, 1 core; 8 GPUs and 64 CPUs per
node) starts with a seeded background mix (other users' work that never ends, a few down and
draining nodes). A stream of jobs then arrives (Poisson) and finishes (exponential run times) so
the cluster stays partly busy. Both placers see the same job stream; each starts queued jobs
greedily in arrival order (the first 32 in the queue are tried at every event, no reservations)
and places a job as soon as it fits anywhere now (policy "any": no --switches wait), so the
numbers compare *where* each puts a job, not *when*.

Slurm simulation (what ``select/cons_tres`` + ``topology/tree`` does without ``--switches``, as
read from ``_eval_nodes_topo``):

1. count, per switch, the nodes that can take the job's per-node share now;
2. the top switch is the highest-level switch with enough such nodes;
3. leaves under it are taken one at a time: the first is the tightest leaf that holds the
   whole remainder; if none does, leaves are compared through their parents (a leaf under a
   spine that holds the remainder wins, the tighter spine first), then by size (larger wins);
   later leaves prefer the smallest summed switch distance to the leaves already taken, then
   the same fit rule;
4. nodes inside a leaf are taken in node-index order.

Older Slurm releases differ in step 3 (no distance term); see bench/README.md.

Reported: our plan time per request (median, p95; includes the explanation text), and for both
placers the mean number of leaf switches per job, per multi-node job, the share of multi-node
jobs on one leaf, and mean spine hops. Ratio = Slurm sim / ours (above 1: ours uses fewer).

Run: ``python -m bench.placement`` (``--jobs``, ``--seed``, ``--json``). ``--real``: beside Slurm's own
tree plugin on the running stack's slurmctld (bench/placement_real.py).
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from clusterd.topology import PlacementRequest, TopologyModel, plan
from clusterd.topology.model import fits
from clusterd.topology.synth import BusyMix, synthetic_cluster

LEAVES, PER_LEAF, SPINES, GPUS, CPUS = 32, 32, 4, 8, 64
QUEUE_SCAN = 32


@dataclass(frozen=True)
class Job:
    index: int
    arrival: float
    duration: float
    nodes: int
    gpus_per_node: int
    cpus_per_node: int


@dataclass
class Outcome:
    leaves: list[int] = field(default_factory=list)
    multi_leaves: list[int] = field(default_factory=list)
    hops: list[int] = field(default_factory=list)
    plan_seconds: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)

    def record(self, model: TopologyModel, nodes: Sequence[str], wait: float = 0.0) -> None:
        """One started job on ``nodes``: its leaf switches, spine hops and queue wait."""
        leaves = list(dict.fromkeys(model.leaf_of(n) for n in nodes))
        self.leaves.append(len(leaves))
        if len(nodes) > 1:
            self.multi_leaves.append(len(leaves))
        self.hops.append(model.spine_levels(leaves) or 0)
        self.waits.append(wait)


Placer = Callable[[TopologyModel, Job], list[str] | None]


def job_stream(count: int, seed: int, load: float = 0.55, nodes: int = LEAVES * PER_LEAF) -> list[Job]:
    """Sizes 1..64 nodes, skewed small (half 1-8, 30% 9-32, 20% 33-64) like real training queues.

    Multi-node jobs take whole nodes (8 GPUs); single-node jobs take 1-8 GPUs. The arrival rate
    keeps the stream's own load near ``load`` (default 55%) of the nodes the background leaves
    free.
    """
    rng = random.Random(seed)
    jobs: list[Job] = []
    sizes: list[int] = []
    for _ in range(count):
        r = rng.random()
        sizes.append(rng.randint(1, 8) if r < 0.5 else rng.randint(9, 32) if r < 0.8 else rng.randint(33, 64))
    mean_size = statistics.mean(sizes)
    free_nodes = nodes * 0.6
    mean_duration = 1.0
    rate = load * free_nodes / (mean_size * mean_duration)
    t = 0.0
    for i, size in enumerate(sizes):
        t += rng.expovariate(rate)
        gpus = GPUS if size > 1 else rng.randint(1, GPUS)
        cpus = CPUS if gpus == GPUS else 8 * gpus
        jobs.append(Job(i, t, rng.expovariate(1 / mean_duration), size, gpus, cpus))
    return jobs


def ours(model: TopologyModel, job: Job) -> list[str] | None:
    request = PlacementRequest(
        nodes=job.nodes, gpus_per_node=job.gpus_per_node, cpus_per_node=job.cpus_per_node, policy="any"
    )
    result = plan(model, request)
    return result.nodes if result.available_now else None


def slurm_best_fit(model: TopologyModel, job: Job) -> list[str] | None:
    """The simulation described in the module docstring."""
    avail = {
        leaf: [n for n in model.leaf_nodes(leaf) if fits(model.node(n), job.gpus_per_node, job.cpus_per_node)]
        for leaf in model.leaves
    }
    cnt: dict[str, int] = {}
    for sw in model.switch_names:
        cnt[sw] = sum(len(avail[leaf]) for leaf in model.leaves_under(sw))
    top = None
    for sw in model.switch_names:
        if cnt[sw] >= job.nodes and (top is None or model.level(sw) >= model.level(top)):
            top = sw
    if top is None:
        return None
    under = set(model.leaves_under(top))
    leaf_cnt = {leaf: (cnt[leaf] if leaf in under else 0) for leaf in model.leaves}

    def parent(sw: str) -> str:
        return model.parent(sw) or sw

    def count(sw: str) -> int:
        return leaf_cnt[sw] if sw in leaf_cnt else cnt[sw]

    def compare(i: str, j: str, rem: int) -> int:
        while True:
            i_fit, j_fit = count(i) >= rem, count(j) >= rem
            if i_fit and j_fit:
                if count(i) != count(j):
                    return 1 if count(i) < count(j) else -1
                break
            if i_fit != j_fit:
                return 1 if i_fit else -1
            if (parent(i) != i or parent(j) != j) and parent(i) != parent(j):
                i, j = parent(i), parent(j)
                continue
            break
        if count(i) != count(j):
            return 1 if count(i) > count(j) else -1
        if model.level(i) != model.level(j):
            return 1 if model.level(i) < model.level(j) else -1
        return 0

    dist = dict.fromkeys(model.leaves, 0)
    chosen: list[str] = []
    rem = job.nodes
    while rem > 0:
        best: str | None = None
        for leaf in model.leaves:
            if leaf_cnt[leaf] == 0:
                continue
            if best is None:
                best = leaf
                continue
            tcs = compare(leaf, best, rem)
            if (dist[leaf] < dist[best] and tcs >= 0) or (dist[leaf] == dist[best] and tcs > 0):
                best = leaf
        if best is None:
            return None
        take = avail[best][:rem]
        chosen.extend(take)
        rem -= len(take)
        leaf_cnt[best] = 0
        for leaf in model.leaves:
            dist[leaf] += model.hops(best, leaf) or 0
    return chosen


def simulate(placer: Placer, jobs: Sequence[Job], base: TopologyModel, *, timed: bool) -> Outcome:
    """Event loop: arrivals and finishes; at each event try the head of the queue in order."""
    out = Outcome()
    model = base
    events: list[tuple[float, int, int]] = [(j.arrival, 1, j.index) for j in jobs]  # kind 1 = arrive
    heapq.heapify(events)
    queue: list[Job] = []
    running: dict[int, list[str]] = {}
    while events:
        now, kind, index = heapq.heappop(events)
        job = jobs[index]
        if kind == 0:  # finish
            model = model.with_allocation(
                running.pop(index), gpus_per_node=job.gpus_per_node, cpus_per_node=job.cpus_per_node, release=True
            )
        else:
            queue.append(job)
        started: list[Job] = []
        for waiting in queue[:QUEUE_SCAN]:
            t0 = time.perf_counter()
            nodes = placer(model, waiting)
            if timed:
                out.plan_seconds.append(time.perf_counter() - t0)
            if nodes is None:
                continue
            model = model.with_allocation(
                nodes, gpus_per_node=waiting.gpus_per_node, cpus_per_node=waiting.cpus_per_node
            )
            running[waiting.index] = nodes
            started.append(waiting)
            heapq.heappush(events, (now + waiting.duration, 0, waiting.index))
            out.record(model, nodes, now - waiting.arrival)
        for s in started:
            queue.remove(s)
    return out


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def _mean(values: Sequence[float]) -> float:
    return statistics.mean(values) if values else float("nan")


def summary(o: Outcome) -> dict[str, float]:
    """The figures both benches print for one placer (nan where it placed no such job)."""
    return {
        "jobs_started": len(o.leaves),
        "mean_leaves_per_job": _mean(o.leaves),
        "mean_leaves_per_multinode_job": _mean(o.multi_leaves),
        "multinode_on_one_leaf_pct": 100 * _mean([float(x == 1) for x in o.multi_leaves]),
        "mean_spine_hops": _mean(o.hops),
        "mean_wait": _mean(o.waits),
        "place_ms_median": 1000 * statistics.median(o.plan_seconds) if o.plan_seconds else float("nan"),
        "place_ms_p95": 1000 * pct(o.plan_seconds, 0.95) if o.plan_seconds else float("nan"),
        "place_calls": len(o.plan_seconds),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, help="jobs in the stream (default 1000; --real: 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", type=float, default=0.55, help="stream load, share of free nodes")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--leaves", type=int, default=LEAVES, help="leaf switches (256 nodes: 16; 4,096: 128)")
    parser.add_argument("--per-leaf", type=int, default=PER_LEAF, help="nodes per leaf (16 on the 256-node stack)")
    parser.add_argument("--spines", type=int, default=SPINES, help="spine switches under the core")
    parser.add_argument("--real", action="store_true", help="beside the real slurmctld's tree plugin on the stack")
    parser.add_argument("--rounds", type=int, default=4, help="--real: backgrounds the stream is split between")
    parser.add_argument("--slurm", help="--real: the stack of this release (default: the suite's)")
    args = parser.parse_args(argv)
    if args.real:
        from bench import placement_real  # imports this module

        real = placement_real.run(args.jobs or 200, args.seed, args.rounds, args.slurm)
        if args.json:
            print(json.dumps(real, indent=2))
        else:
            placement_real.report(real)
        return
    args.jobs = args.jobs or 1000

    switches, nodes = synthetic_cluster(
        args.leaves,
        args.per_leaf,
        args.spines,
        gpus=GPUS,
        cpus=CPUS,
        seed=args.seed,
        mix=BusyMix(full=0.25, partial=0.15, down=0.01, drain=0.01),
    )
    t0 = time.perf_counter()
    base = TopologyModel.build(switches, nodes)
    base.stats("core")
    build_s = time.perf_counter() - t0
    jobs = job_stream(args.jobs, args.seed, args.load, args.leaves * args.per_leaf)

    t0 = time.perf_counter()
    ours_out = simulate(ours, jobs, base, timed=True)
    ours_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    slurm_out = simulate(slurm_best_fit, jobs, base, timed=True)
    slurm_wall = time.perf_counter() - t0

    a, b = summary(ours_out), summary(slurm_out)
    result = {
        "cluster": (
            f"{args.leaves * args.per_leaf} nodes: {args.leaves} leaves x {args.per_leaf}, {args.spines} spines, 1 core"
        ),
        "jobs": args.jobs,
        "seed": args.seed,
        "load": args.load,
        "model_build_ms": 1000 * build_s,
        "ours": a,
        "slurm_sim": b,
        "wall_s": {"ours": ours_wall, "slurm_sim": slurm_wall},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return

    print(f"placement bench: {result['cluster']}; {args.jobs} jobs, seed {args.seed}, load {args.load}")
    print(f"model build ({args.leaves * args.per_leaf:,} nodes): {result['model_build_ms']:.1f} ms")
    rows = [
        ("jobs started", "jobs_started", "{:.0f}", False),
        ("mean leaf switches / job", "mean_leaves_per_job", "{:.3f}", True),
        ("mean leaf switches / multi-node job", "mean_leaves_per_multinode_job", "{:.3f}", True),
        ("multi-node jobs on one leaf (%)", "multinode_on_one_leaf_pct", "{:.1f}", False),
        ("mean spine hops / job", "mean_spine_hops", "{:.3f}", True),
        ("mean queue wait (job durations)", "mean_wait", "{:.3f}", False),
        ("place time median (ms)", "place_ms_median", "{:.3f}", False),
        ("place time p95 (ms)", "place_ms_p95", "{:.3f}", False),
    ]
    print(f"{'':38}{'clusterd planner':>18}{'slurm best-fit sim':>20}{'ratio sim/ours':>16}")
    for label, key, fmt, ratio in rows:
        r = f"{b[key] / a[key]:.2f}x" if ratio and a[key] else ""
        print(f"{label:38}{fmt.format(a[key]):>18}{fmt.format(b[key]):>20}{r:>16}")
    print("place time: ours is plan() incl. feasibility and explanation; the sim only selects nodes.")


if __name__ == "__main__":
    main()
