"""Placement on the real slurmctld: clusterd's planner beside Slurm's own ``topology/tree`` plugin.

``python -m bench.placement --real`` on the running stack (``stack.sh up --nodes 256``: 16 leaf
switches of 16 nodes under one spine). Long jobs of bob's (``sleep``, whole nodes, pinned with
``--nodelist``) hold a seeded random background: each leaf's busy share drawn from 0-80%, so the
leaves differ as on a real cluster. slurmctld and the planner then see the same fragmented
cluster. For each size of a seeded stream (``job_stream``: 1..64 nodes, skewed small), every job
taking whole nodes:

* Slurm, without submitting: ``sbatch --test-only -N k --exclusive`` as bob prints where and when
  the job would start. Once plain, once with the ``--switches=N@5:00`` that the planner's ``pack``
  plan hands Slurm (N: the fewest leaves an empty cluster needs; none for one node).
* clusterd's ``plan()`` with policies ``any`` and ``pack``, on a ``TopologyModel`` built as the
  service builds it: the commands backend's ``list_nodes`` and ``topology``.
* the simulation of Slurm's best fit (``slurm_best_fit``) on the same model: how faithful it is.

``--rounds`` draws that many backgrounds, the stream split between them; nothing is submitted
but the background, which is cancelled at the end of each round (or on an error, Ctrl-C or SIGTERM)
and ends by its own time limit should the bench be killed outright. A job "starts now" when the
start sbatch prints (in UTC: TZ is set for it) is within a minute of the probe; one Slurm cannot
place now starts when a background job ends, minutes on.

Slurm's plan time is ``sbatch --test-only``'s wall time: a process under runuser, munge, the RPC
and slurmctld's scheduling test. Beside it: the process floor (``sbatch --version`` under runuser)
and slurmctld's own time for the RPC (sdiag's REQUEST_JOB_WILL_RUN total over its count).

Without a stack, or with one too small to compare on, Slurm's columns print "anchor missing (why)"
and the planner and the simulation still run, on the synthetic tree of the same shape. A stack
lost on the way (slurmctld stops answering) stops the run: the rounds already done stand.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from types import FrameType

from bench.placement import Job, Outcome, job_stream, slurm_best_fit, summary
from bench.submit import cancel_by_name, sdiag, slurm_env, wait_queue_clear
from clusterctl.hostlist import compress_hostlist, expand_hostlist
from clusterd.config import SlurmConfig
from clusterd.errors import ServiceError
from clusterd.slurm.commands import CommandsBackend
from clusterd.topology import PlacementRequest, Plan, Policy, TopologyModel, plan
from clusterd.topology.synth import BusyMix, synthetic_cluster
from tests.support.stack import Stack, stack_dir_for

USER = "bob"  # a stack user: Slurm answers as it would any tenant
MOST_BUSY = 0.8  # the largest busy share a leaf is drawn
NOW = timedelta(seconds=60)  # a start within this of the probe is "now"
HOLD_MINUTES = 10  # the background's time limit: past any round, so a killed bench's ends soon
MIN_NODES = 64  # the stream's largest job; a smaller stack cannot place it
SHAPE = (16, 16, 0)  # the 256-node stack's tree: 16 leaves of 16 under one switch (spines=0)
WILL_RUN = "REQUEST_JOB_WILL_RUN"

_TEST_ONLY = re.compile(r"Job \d+ to start at (\S+) using \d+ processors on nodes (\S+) in partition")
_REFUSED = ("allocation failure", "Requested node configuration is not available")


@dataclass(frozen=True)
class TestOnly:
    """Where and when ``sbatch --test-only`` says a job would start."""

    __test__ = False  # not a pytest class, whatever its name

    start: datetime
    nodes: tuple[str, ...]


def parse_test_only(text: str) -> TestOnly | None:
    """sbatch --test-only's answer (stderr): ``sbatch: Job 12 to start at 2026-11-29T10:43:38 using
    16 processors on nodes node[1-4] in partition debug``, printed in UTC (:func:`ask_slurm` sets
    TZ; sbatch's own zone may not be the host's); None when Slurm refuses the request outright (no
    placement could ever satisfy it, e.g. ``--switches=1`` for more than a leaf).

    Raises:
        ValueError: any other text (an error, another release's wording).
    """
    m = _TEST_ONLY.search(text)
    if m:
        start = datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC)
        return TestOnly(start, tuple(expand_hostlist(m.group(2))))
    if any(s in text for s in _REFUSED):
        return None
    raise ValueError(f"unexpected sbatch --test-only output: {text.strip()[:200]!r}")


@dataclass
class Tally:
    """One placer's picks: the figures of bench.placement plus how often it starts a job now."""

    out: Outcome = field(default_factory=Outcome)
    picks: list[frozenset[str] | None] = field(default_factory=list)  # None: not now (waits or refused)
    leaf_sets: list[frozenset[str] | None] = field(default_factory=list)

    def add(self, model: TopologyModel, nodes: Sequence[str] | None, seconds: float) -> None:
        self.out.plan_seconds.append(seconds)
        self.picks.append(frozenset(nodes) if nodes else None)
        self.leaf_sets.append(frozenset(model.leaf_of(n) for n in nodes) if nodes else None)
        if nodes:
            self.out.record(model, nodes)

    def extend(self, other: Tally) -> None:
        """Take ``other``'s picks after this one's: a round's, once the round is complete."""
        for f in fields(Outcome):
            getattr(self.out, f.name).extend(getattr(other.out, f.name))
        self.picks.extend(other.picks)
        self.leaf_sets.extend(other.leaf_sets)

    def figures(self) -> dict[str, float]:
        """bench.placement's summary plus the mean plan time."""
        mean = 1000 * statistics.mean(self.out.plan_seconds) if self.out.plan_seconds else float("nan")
        return {**summary(self.out), "place_ms_mean": mean}


@dataclass
class Anchor:
    """The real slurmctld, or why it is missing."""

    env: dict[str, str] | None
    why: str = ""
    version: str = ""
    bin_dir: str = ""  # the release's Slurm commands ("": the host's)


PLACERS = ("ours_any", "slurm", "sim", "ours_pack", "slurm_switches")
REFERENCE = {"ours_any": "slurm", "sim": "slurm", "ours_pack": "slurm_switches"}  # the real Slurm each is held to
NAN = float("nan")


def leaf_background(model: TopologyModel, rng: random.Random) -> list[list[str]]:
    """Per leaf, the nodes the background holds: a share drawn from 0..MOST_BUSY, idle nodes at random.

    Only idle nodes: a job pinned to a node slurmctld has just set DOWN (a slurmd too slow to answer
    its ping on a loaded host) would pend.
    """
    out = []
    for leaf in model.leaves:
        nodes = list(model.leaf_nodes(leaf))
        idle = [n for n in nodes if model.node_stats(n).nodes_idle]
        busy = rng.sample(idle, min(round(rng.uniform(0, MOST_BUSY) * len(nodes)), len(idle)))
        out.append(sorted(busy, key=nodes.index))
    return out


def idle_nodes(model: TopologyModel) -> frozenset[str]:
    """The nodes a whole-node job may start on now."""
    return frozenset(n for n in model.nodes if model.node_stats(n).nodes_idle)


def as_user(env: dict[str, str], *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``argv`` run as USER from /tmp, and its wall seconds."""
    t0 = time.perf_counter()
    done = subprocess.run(
        ["runuser", "-u", USER, "--", *argv], env=env, cwd="/tmp", capture_output=True, text=True, timeout=60
    )
    return done, time.perf_counter() - t0


def hold(env: dict[str, str], name: str, busy: list[list[str]]) -> None:
    """One whole-node job per leaf on its busy nodes, up to HOLD_MINUTES; returns once all run."""
    for nodes in (b for b in busy if b):
        done, _ = as_user(
            env,
            *("sbatch", "--parsable", f"--job-name={name}", "--exclusive", "-o", "/dev/null"),
            *(f"--time={HOLD_MINUTES}", f"--nodes={len(nodes)}", f"--nodelist={compress_hostlist(nodes)}"),
            "--wrap=sleep 3600",
        )
        if done.returncode != 0:
            raise RuntimeError(f"background job on {compress_hostlist(nodes)}: {done.stderr.strip()}")
    deadline = time.monotonic() + 120
    while True:
        pending = subprocess.run(
            ["squeue", "-h", f"--name={name}", "-t", "PD,CF", "-o", "%N %r"], env=env, capture_output=True, text=True
        )
        if pending.returncode == 0 and not pending.stdout.strip():
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"background jobs pending after 120 s: {pending.stdout.strip()[:120]}")
        time.sleep(0.5)


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """SIGTERM raises SystemExit meanwhile, so that ``finally`` cancels the background (by default
    the signal would end the process on the spot and leave the jobs to their time limit)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    main = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = signal.signal(signal.SIGTERM, stop) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def release(env: dict[str, str], name: str) -> None:
    """Cancel the background and wait until its nodes are free again."""
    cancel_by_name(name, env)
    wait_queue_clear(name, env, timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # COMPLETING nodes would be busy to the next background
        states = subprocess.run(
            ["sinfo", "-h", "-t", "COMPLETING", "-o", "%D"], env=env, capture_output=True, text=True
        )
        if not states.stdout.strip():
            return
        time.sleep(0.5)


def real_model(env: dict[str, str], bin_dir: str) -> tuple[TopologyModel, float]:
    """The model as the service builds it, and the seconds the two Slurm reads plus the build took."""
    backend = CommandsBackend(SlurmConfig(slurm_conf=env["SLURM_CONF"], bin_dir=bin_dir))

    async def read() -> TopologyModel:
        nodes, switches = await backend.list_nodes(), await backend.topology()
        return TopologyModel.build(switches, nodes)

    t0 = time.perf_counter()
    model = asyncio.run(read())
    return model, time.perf_counter() - t0


def ask_slurm(env: dict[str, str], nodes: int, extra: Sequence[str]) -> tuple[tuple[str, ...] | None, float]:
    """Slurm's nodes for a whole-node job if it starts now (None: it would wait or is refused)."""
    probed = datetime.now(UTC)
    argv = ("sbatch", "--test-only", f"--nodes={nodes}", "--exclusive", *extra, "--wrap=true")
    done, seconds = as_user({**env, "TZ": "UTC0"}, *argv)  # a POSIX zone: no zoneinfo file to miss
    answer = parse_test_only(done.stderr + done.stdout)
    return (answer.nodes if answer is not None and starts_now(answer, probed) else None), seconds


def starts_now(answer: TestOnly, probed: datetime) -> bool:
    """Whether Slurm would start the job at once (not when a background job ends).

    Raises:
        ValueError: a start well before the probe: sbatch printed another zone than UTC.
    """
    if answer.start < probed - NOW:
        raise ValueError(f"sbatch --test-only's start {answer.start} is before the probe {probed}: not UTC")
    return answer.start - probed <= NOW


def plan_all(model: TopologyModel, jobs: Sequence[Job], tallies: dict[str, Tally]) -> list[list[str]]:
    """The planner's (policies any, pack) and the simulation's picks; the switch option of each pack plan."""
    switch_args = []
    for job in jobs:
        plan_one(model, job, "any", tallies["ours_any"])
        pack = plan_one(model, job, "pack", tallies["ours_pack"])
        switch_args.append([a for a in pack.sbatch_args if a.startswith("--switches=")])
        t0 = time.perf_counter()
        nodes = slurm_best_fit(model, job)
        tallies["sim"].add(model, nodes, time.perf_counter() - t0)
    return switch_args


def plan_one(model: TopologyModel, job: Job, policy: Policy, tally: Tally) -> Plan:
    """The planner's plan for ``job`` under ``policy``, its pick (if it starts now) added to ``tally``."""
    request = PlacementRequest(
        nodes=job.nodes, gpus_per_node=job.gpus_per_node, cpus_per_node=job.cpus_per_node, policy=policy
    )
    t0 = time.perf_counter()
    result = plan(model, request)
    tally.add(model, result.nodes if result.available_now else None, time.perf_counter() - t0)
    return result


def ask_all(
    env: dict[str, str], model: TopologyModel, jobs: Sequence[Job], extra: Sequence[list[str]], tally: Tally
) -> tuple[int, int]:
    """Slurm's picks for ``jobs`` (with ``extra`` options each); slurmctld's (RPCs, µs) for them (sdiag)."""
    before = sdiag(env)
    for job, options in zip(jobs, extra, strict=True):
        picked, seconds = ask_slurm(env, job.nodes, options)
        tally.add(model, picked, seconds)
    after = sdiag(env)
    count = after.counts.get(WILL_RUN, 0) - before.counts.get(WILL_RUN, 0)
    return count, after.micros.get(WILL_RUN, 0) - before.micros.get(WILL_RUN, 0)


def find_anchor(version: str | None) -> Anchor:
    """The stack's Slurm environment if it is up and big enough to compare on."""
    directory = stack_dir_for(version)
    if not (directory / "env").exists():
        return Anchor(None, f"no stack in {directory}: deploy/local/stack.sh up --nodes 256")
    stack = Stack.load(directory)
    env = slurm_env(stack)
    probe_ = subprocess.run(["sinfo", "-h", "-o", "%D", "-p", "debug"], env=env, capture_output=True, text=True)
    version = stack.slurm_version
    if probe_.returncode != 0:
        return Anchor(None, f"slurmctld does not answer: {probe_.stderr.strip()[:120]}", version)
    size = int(probe_.stdout.split()[0]) if probe_.stdout.split() else 0
    if size < MIN_NODES:
        return Anchor(None, f"the stack has {size} nodes, under {MIN_NODES}; stack.sh up --nodes 256", version)
    if os.geteuid() != 0:
        return Anchor(None, f"runuser -u {USER} needs root", version)
    return Anchor(env, version=version, bin_dir=stack.slurm_bin)


def fallback_model() -> TopologyModel:
    """The 256-node stack's shape, synthetic, every node idle (whole nodes of 4 CPUs and 4 GPUs)."""
    leaves, per_leaf, spines = SHAPE
    nothing = BusyMix(full=0, partial=0, down=0, drain=0)
    switches, nodes = synthetic_cluster(leaves, per_leaf, spines, gpus=4, cpus=4, mix=nothing)
    return TopologyModel.build(switches, nodes)


def shape(model: TopologyModel) -> str:
    sizes = {len(model.leaf_nodes(leaf)) for leaf in model.leaves}
    per = str(sizes.pop()) if len(sizes) == 1 else "mixed"
    upper = [s for s in model.switch_names if s not in model.leaves]
    return f"{len(model.nodes)} nodes: {len(model.leaves)} leaves x {per}, {len(upper)} switch(es) above"


@dataclass
class Round:
    """One background's figures; a run keeps only the rounds it completes."""

    model: TopologyModel
    busy_share: float
    refresh_seconds: float | None  # the model's read from Slurm (None: the synthetic tree)
    tallies: dict[str, Tally] = field(default_factory=lambda: {p: Tally() for p in PLACERS})
    ctld: dict[str, tuple[int, int]] = field(default_factory=dict)  # WILL_RUN RPCs, µs in slurmctld
    floor_seconds: list[float] = field(default_factory=list)
    unsteady: bool = False  # idle nodes changed while Slurm was asked


def one_round(anchor: Anchor, name: str, rng: random.Random, stream: Sequence[Job]) -> Round:
    """Draw a background (held on the stack as job ``name``), then plan and ask Slurm for ``stream``."""
    if anchor.env is not None:
        busy = leaf_background(real_model(anchor.env, anchor.bin_dir)[0], rng)
        hold(anchor.env, name, busy)
        model, seconds = real_model(anchor.env, anchor.bin_dir)
        rnd = Round(model, sum(map(len, busy)) / len(model.nodes), seconds)
    else:
        empty = fallback_model()
        busy = leaf_background(empty, rng)
        model = empty.with_allocation([n for b in busy for n in b], gpus_per_node=4, cpus_per_node=4)
        rnd = Round(model, sum(map(len, busy)) / len(model.nodes), None)
    gpus, cpus = max((n.gpus_total, n.cpus_total) for n in model.nodes.values())
    part = [Job(j.index, 0.0, 0.0, j.nodes, gpus, cpus) for j in stream]
    switch_args = plan_all(model, part, rnd.tallies)
    if anchor.env is not None:
        for key, extra in (("slurm", [[] for _ in part]), ("slurm_switches", switch_args)):
            rnd.ctld[key] = ask_all(anchor.env, model, part, extra, rnd.tallies[key])
        rnd.unsteady = idle_nodes(real_model(anchor.env, anchor.bin_dir)[0]) != idle_nodes(model)
        rnd.floor_seconds = [as_user(anchor.env, "sbatch", "--version")[1] for _ in range(3)]
    return rnd


# What a lost or failing stack raises on the way: slurmctld not answering (ServiceError from the
# backend, SubprocessError from sdiag), a node Slurm names that the model lacks (KeyError), ...
STOPS = (ServiceError, KeyError, RuntimeError, ValueError, OSError, subprocess.SubprocessError)


def run(jobs: int, seed: int, rounds: int, version: str | None) -> dict[str, object]:
    """The comparison; the figures as bench.placement.main prints them (see :func:`report`).

    An error on the way stops it: the rounds already complete stand (none: Slurm's anchor is
    missing, the error its why), the background is cancelled.
    """
    anchor = find_anchor(version)
    rng = random.Random(seed)
    stream = job_stream(jobs, seed)
    name = f"ccplace-{os.getpid()}"
    kept: list[Round] = []
    stopped = ""
    with sigterm_exits():
        try:
            for r in range(rounds):
                kept.append(one_round(anchor, name, rng, stream[r * jobs // rounds : (r + 1) * jobs // rounds]))
                if anchor.env is not None:
                    release(anchor.env, name)
        except STOPS as exc:
            why = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line: squeue's answer has several
            if kept:
                stopped = why[:300]
            else:
                anchor.why = f"stopped: {why}"[:300]
        finally:
            if anchor.env is not None:
                cancel_by_name(name, anchor.env)
    return figures(kept, anchor, stopped, rounds, seed)


def figures(kept: Sequence[Round], anchor: Anchor, stopped: str, rounds: int, seed: int) -> dict[str, object]:
    """The complete rounds' figures together, as :func:`report` prints them."""
    tallies = {p: Tally() for p in PLACERS}
    for rnd in kept:
        for p, tally in rnd.tallies.items():
            tallies[p].extend(tally)
    placers = {p: t.figures() for p, t in tallies.items()}
    for key in ("slurm", "slurm_switches"):
        count = sum(rnd.ctld.get(key, (0, 0))[0] for rnd in kept)
        micros = sum(rnd.ctld.get(key, (0, 0))[1] for rnd in kept)
        placers[key]["slurmctld_ms"] = micros / count / 1000 if count else float("nan")
    refresh = [rnd.refresh_seconds for rnd in kept if rnd.refresh_seconds is not None]
    floor = [s for rnd in kept for s in rnd.floor_seconds]
    return {
        "cluster": (shape(kept[-1].model) + (" (synthetic)" if not refresh else "")) if kept else "no model",
        "slurm": anchor.version or None,
        "anchor_missing": anchor.why or None,
        "jobs": len(tallies["ours_any"].picks),
        "rounds": len(kept),
        "stopped": f"after {len(kept)} of {rounds} backgrounds: {stopped}" if stopped else None,
        "unsteady_rounds": sum(rnd.unsteady for rnd in kept),
        "seed": seed,
        "busy_pct": 100 * statistics.mean(rnd.busy_share for rnd in kept) if kept else float("nan"),
        "model_refresh_ms": 1000 * statistics.median(refresh) if refresh else float("nan"),
        "process_floor_ms": 1000 * statistics.median(floor) if floor else float("nan"),
        "placers": placers,
        "agreement": agreement(tallies, not anchor.why),
    }


def agreement(tallies: dict[str, Tally], real: bool) -> dict[str, dict[str, float]]:
    """How often each placer's answer equals real Slurm's (REFERENCE): the start-now decision over
    all jobs; leaf switches and nodes over the jobs both start now (two placers that both leave a
    job waiting have not picked the same nodes). All nan without real Slurm's answers."""

    def share(pairs: Sequence[tuple[object, object]]) -> float:
        return 100 * sum(a == b for a, b in pairs) / len(pairs) if pairs else NAN

    out = {}
    for placer, ref in REFERENCE.items():
        a, b = tallies[placer], tallies[ref]
        if not real:
            out[placer] = dict.fromkeys(
                ("both_start_now", "same_leaves_pct", "same_nodes_pct", "same_start_now_pct"), NAN
            )
            continue
        pairs = list(zip(a.picks, b.picks, strict=True))
        both = [i for i, (x, y) in enumerate(pairs) if x is not None and y is not None]
        out[placer] = {
            "both_start_now": float(len(both)),
            "same_leaves_pct": share([(a.leaf_sets[i], b.leaf_sets[i]) for i in both]),
            "same_nodes_pct": share([(a.picks[i], b.picks[i]) for i in both]),
            "same_start_now_pct": share([(x is not None, y is not None) for x, y in pairs]),
        }
    return out


# label, key, format, the key of the planner's figure a ratio is taken against ("": no ratio)
ROWS = (
    ("jobs that start now", "jobs_started", "{:.0f}", ""),
    ("mean leaf switches / job", "mean_leaves_per_job", "{:.3f}", "mean_leaves_per_job"),
    ("mean leaf switches / multi-node job", "mean_leaves_per_multinode_job", "{:.3f}", "mean_leaves_per_multinode_job"),
    ("multi-node jobs on one leaf (%)", "multinode_on_one_leaf_pct", "{:.1f}", ""),
    ("mean spine hops / job", "mean_spine_hops", "{:.3f}", "mean_spine_hops"),
    ("plan time mean (ms)", "place_ms_mean", "{:.3f}", "place_ms_mean"),
    ("plan time median (ms)", "place_ms_median", "{:.3f}", "place_ms_median"),
    ("plan time p95 (ms)", "place_ms_p95", "{:.3f}", "place_ms_p95"),
    ("  in slurmctld, mean (ms; sdiag)", "slurmctld_ms", "{:.3f}", "place_ms_mean"),
)
# label, key, format: each placer held to the real Slurm of its table (REFERENCE)
AGREEMENT = (
    ("jobs it and real Slurm both start now", "both_start_now", "{:.0f}"),
    ("  same leaf switches, of those (%)", "same_leaves_pct", "{:.1f}"),
    ("  same nodes, of those (%)", "same_nodes_pct", "{:.1f}"),
    ("same start-now decision, all jobs (%)", "same_start_now_pct", "{:.1f}"),
)


def _cell(fmt: str, value: float, missing: bool) -> str:
    if missing:
        return "missing"
    return "-" if value != value else fmt.format(value)  # nan: nothing of that kind


def _table(result: dict[str, object], columns: Sequence[tuple[str, str]]) -> None:
    """Rows of figures for ``columns`` (placer, title): the planner first, real Slurm second."""
    placers, agree = result["placers"], result["agreement"]
    assert isinstance(placers, dict) and isinstance(agree, dict)
    missing = result["anchor_missing"] is not None
    ours, slurm = columns[0][0], columns[1][0]
    print(f"{'':38}" + "".join(f"{title:>18}" for _, title in columns) + f"{'slurm / ours':>14}")
    for label, key, fmt, against in ROWS:
        cells = [_cell(fmt, placers[p].get(key, NAN), missing and p.startswith("slurm")) for p, _ in columns]
        a, b = placers[ours].get(against, NAN), placers[slurm].get(key, NAN)
        r = f"{b / a:.2f}x" if against and not missing and a and a == a and b == b else ""
        print(f"{label:38}" + "".join(f"{c:>18}" for c in cells) + f"{r:>14}")
    for label, key, fmt in AGREEMENT:
        cells = [_cell(fmt, agree[p][key], missing) if p in agree else "" for p, _ in columns]
        print(f"{label:38}" + "".join(f"{c:>18}" for c in cells))


def report(result: dict[str, object]) -> None:
    """The two tables: no switch limit (Slurm's default), and the limit clusterd's ``pack`` asks for."""
    slurm = f"Slurm {result['slurm']}" if result["slurm"] else "no Slurm"
    if result["anchor_missing"]:
        slurm += f", not compared: {result['anchor_missing']}"
    print(
        f"placement on the real slurmctld ({slurm}): {result['cluster']}; {result['jobs']} jobs over "
        f"{result['rounds']} backgrounds ({result['busy_pct']:.0f}% of nodes busy), seed {result['seed']}"
    )
    refresh = result["model_refresh_ms"]
    assert isinstance(refresh, float)
    if refresh == refresh:  # nan: the synthetic tree, nothing read from Slurm
        print(f"model refresh (list_nodes + scontrol show topology + build): {refresh:.0f} ms")
    if result["stopped"]:
        print(f"stopped {result['stopped']}")
    if result["unsteady_rounds"]:
        print(
            f"idle nodes changed while Slurm was asked in {result['unsteady_rounds']} of {result['rounds']} "
            "backgrounds (slurmd missing slurmctld's pings on a loaded host): Slurm answered for another cluster"
        )
    print("\nno switch limit: planner policy any; sbatch --test-only -N k --exclusive")
    _table(result, [("ours_any", "clusterd any"), ("slurm", "slurm (real)"), ("sim", "slurm sim")])
    print("\nswitch limit: planner policy pack; Slurm given the --switches=N@5:00 that plan hands over")
    _table(result, [("ours_pack", "clusterd pack"), ("slurm_switches", "slurm --switches")])
    if result["anchor_missing"]:
        print(f"\nslurm (real): anchor missing ({result['anchor_missing']})")
        return
    print(
        "\nSlurm's plan time: sbatch --test-only's wall time (a process under runuser, munge, the RPC, the "
        f"scheduling test; the process floor, sbatch --version, is {result['process_floor_ms']:.1f} ms); in "
        f"slurmctld: sdiag's {WILL_RUN} time over its count. The planner's includes its explanation; the "
        "sim only selects nodes."
    )
