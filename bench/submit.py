"""Submission and watch fan-out: clusterd against raw Slurm on the local stack, side by side.

What is measured, and why:

1. Submit latency p50/p95: ``ClusterClient.submit`` of a tiny job (:data:`TINY_JOB`, ``true`` in a
   batch script) through gRPC vs ``sbatch --parsable --uid=alice`` of the same script run directly
   as root, interleaved one by one so that both see the same machine. The same script both ways: a
   ``command=`` job runs ``srun`` (a job step: more slurmctld RPCs and processes per job), and the
   jobs start while the submissions go on, on the same 2 cores. Ours includes auth, validation,
   placement, the SQLite record and the backend's submit to Slurm, so the ratio is the price of the
   service per submit.
2. Throughput with 16 concurrent clients (threads, each its own ClusterClient, connected before the
   clock starts, as a launcher's long-lived client is) vs 16 concurrent raw sbatch processes, the
   same number of jobs each (two halves, in ABBA order), measured twice: with the jobs submitted
   held (``--hold`` both ways: the price of submitting alone) and with jobs that start and end
   during the storm, on the same cores. Beside the rates, the CPU each way costs per submission:
   user + system seconds over its halves of our clusterd (with its children), the stack's
   slurmrestd and slurmctld (their pid files), the raw sbatch processes and the bench's own client
   threads, and the machine's idle share; on a shared 2-core machine this says which side is bound
   by the cores and which by one process.
3. slurmctld's load from watchers: ``sdiag`` RPC counts (JOB_INFO, NODE_INFO, PARTITION_INFO, total)
   with 1 and with 100 WatchJobs streams open on our own clusterd (poll interval fixed), minus an
   idle window with no clusterd of ours (the stack's own clusterd and other users of slurmctld are
   that background). Next to it the naive way: clients each polling ``squeue --json`` every
   interval, measured with 10 pollers and scaled to 1 and 100. The window is split into rounds in
   ABBA order so that the background's drift spreads over every condition. Because that background
   is large and noisy on a shared stack, the watching side's read-only queries (our clusterd's
   squeue/sinfo/scontrol show, through a wrapped ``bin_dir``, and the naive pollers) run as
   ``nobody``: sdiag's per-user count of ``nobody`` is an exact figure that nothing else can skew,
   and the wrappers also count the commands our clusterd ran.

Our clusterd runs with its own config, tokens file and job root under a temp dir, so that a restart
of the stack (which may regenerate its tokens) does not break the run; a window during which
slurmctld restarted is measured again. Every job is named ``ccbench-<pid>`` and cancelled by that
name (as root) after each phase and at the end. Needs root and the local stack (deploy/local/stack.sh
up). Defaults take ~5 minutes; ``--quick`` ~1 minute.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import re
import resource
import secrets
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from clusterctl.client import ClusterClient
from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack, stack_for

SLURM_COMMANDS = ("sbatch", "scancel", "scontrol", "squeue", "sinfo")
RPC_TYPES = ("REQUEST_JOB_INFO", "REQUEST_NODE_INFO", "REQUEST_PARTITION_INFO")
# The watching side's read-only queries (clusterd's polls, the naive pollers) run as this otherwise
# idle user, so that sdiag's per-user count attributes them exactly, whatever else hits slurmctld.
PROBE_USER = "nobody"
# What every submission here runs, through clusterd and through raw sbatch alike.
TINY_JOB = "#!/bin/sh\ntrue\n"


# -- the stack ---------------------------------------------------------------------------------


def slurm_env(stack: Stack) -> dict[str, str]:
    """This environment with the stack's SLURM_CONF and its release's Slurm commands first on PATH."""
    env = stack.slurm_env()
    env.setdefault("SLURM_CONF", "/etc/slurm/slurm.conf")
    return env


def write_config(
    directory: Path,
    slurm_conf: str,
    user: str,
    bin_dir: str = "",
    restd: tuple[str, str] | None = None,
    token: str = "",
    burst: int = 0,
) -> tuple[Path, str]:
    """A clusterd config of our own: own tokens file and job root, so a restart of the stack (which
    may regenerate its tokens or remove its state dir) does not pull the ground from under us.

    ``restd`` = (slurmrestd URL, JWT key file): the slurmrestd backend instead of Slurm's commands
    (written beside as ``clusterd-slurmrestd.toml``, sharing ``token``). ``burst``: the per-user rate
    limit's bucket (0: the default), so that a submit phase measures the submit path, not refusals."""
    tokens = directory / "tokens.toml"
    if not token:
        token = secrets.token_hex(16)
        tokens.write_text(f'[[token]]\nuser = "{user}"\ntoken = "{token}"\nadmin = false\n')
        tokens.chmod(0o600)
    backend = (
        f'backend = "slurmrestd"\nrestd_url = "{restd[0]}"\njwt_key_file = "{restd[1]}"\n'
        if restd
        else ('backend = "commands"\n')
    )
    limits = f"[limits]\nburst = {burst}\n\n" if burst else ""
    config = directory / ("clusterd-slurmrestd.toml" if restd else "clusterd.toml")
    config.write_text(
        f'tokens_file = "{tokens}"\n\n{limits}[slurm]\n{backend}slurm_conf = "{slurm_conf}"\n'
        f'default_partition = "debug"\njob_root = "{directory / "jobs"}"\nbin_dir = "{bin_dir}"\n'
    )
    return config, token


def restd_of(stack: Stack, backend: str) -> tuple[str, str] | None:
    """The stack's slurmrestd (URL, JWT key) when ``backend`` asks for it; ``auto``: when the stack has one."""
    url, key = stack.env.get("CLUSTERCTL_RESTD_URL", ""), stack.env.get("CLUSTERCTL_JWT_KEY", "")
    have = bool(url and key and os.path.exists(key))
    if backend == "slurmrestd" and not have:
        raise SystemExit("--backend slurmrestd: the stack's env file names no slurmrestd (CLUSTERCTL_RESTD_URL)")
    return (url, key) if have and backend != "commands" else None


def wait_for_slurm(env: dict[str, str], timeout: float = 300.0) -> None:
    """The stack may be restarted by someone else: wait until slurmctld answers again."""
    deadline = time.monotonic() + timeout
    while True:
        ok = subprocess.run(["sinfo", "-h"], capture_output=True, env=env, timeout=30).returncode == 0
        if ok:
            return
        if time.monotonic() > deadline:
            raise SystemExit("slurmctld does not answer (sinfo fails); is the stack up?")
        print("  (sinfo fails; waiting for the stack)", file=sys.stderr)
        time.sleep(5)


def cancel_by_name(name: str, env: dict[str, str]) -> None:
    subprocess.run(["scancel", f"--name={name}"], capture_output=True, env=env, timeout=60)


def wait_queue_clear(name: str, env: dict[str, str], timeout: float = 30.0) -> None:
    """Until no job of ours is pending or running, so that the next phase starts on a quiet queue."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", f"--name={name}", "-t", "PD,R,CG", "-o", "%i"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        ).stdout
        if not out.strip():
            return
        time.sleep(1)


def wait_settled(client: ClusterClient, timeout: float = 60.0) -> None:
    """Until our clusterd has seen every job of ours end (its poll, after a cancel): otherwise the
    next phase would pay for recording the last one's cancellations."""
    deadline = time.monotonic() + timeout
    while client.list_jobs(limit=1) and time.monotonic() < deadline:
        time.sleep(0.5)


# -- our own clusterd --------------------------------------------------------------------------


def bench_daemon(
    stack: Stack,
    env: dict[str, str],
    config: Path,
    state_dir: Path,
    poll_interval: float,
    metrics_port: int | None = None,
    extra_env: dict[str, str] | None = None,
) -> Daemon:
    """Our own clusterd (tests.support.daemon) with the bench's ``config``, on loopback TCP as measured
    before; the stack's SLURM_CONF and PATH (see :func:`slurm_env`) and CLUSTERD_* settings reach it."""
    settings = {k: v for k, v in env.items() if k.startswith("CLUSTERD_")}
    keep = ("SLURM_CONF", "CLUSTERCTL_SLURM_BIN", "CLUSTERCTL_SLURM_VERSION")
    slurm = {k: v for k, v in stack.env.items() if k in keep}
    return Daemon(
        Stack(stack.dir, slurm),
        state_dir,
        poll_interval,
        metrics_port=metrics_port,
        config=config,
        tcp=True,
        extra_env={**settings, **(extra_env or {})},
    )


@contextlib.contextmanager
def running(daemon: Daemon) -> Iterator[Daemon]:
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def make_wrappers(directory: Path, log: Path, user: pwd.struct_passwd, search_path: str) -> None:
    """Slurm commands that append their name to ``log`` and exec the real binary; the read-only
    ones (squeue, sinfo, scontrol show) as ``user``, so that sdiag counts them under that user."""
    directory.mkdir(parents=True, exist_ok=True)
    as_user = f"setpriv --reuid={user.pw_uid} --regid={user.pw_gid} --clear-groups"
    for prog in SLURM_COMMANDS:
        real = shutil.which(prog, path=search_path)  # the stack's release (its wrappers come first on its PATH)
        if real is None:
            raise SystemExit(f"{prog} not found on PATH")
        if prog in ("squeue", "sinfo"):
            run = f'exec {as_user} {shlex.quote(real)} "$@"'
        elif prog == "scontrol":
            run = f'[ "$1" = show ] && exec {as_user} {shlex.quote(real)} "$@"\nexec {shlex.quote(real)} "$@"'
        else:
            run = f'exec {shlex.quote(real)} "$@"'
        path = directory / prog
        path.write_text(f"#!/bin/sh\necho {prog} >> {shlex.quote(str(log))}\n{run}\n")
        path.chmod(0o755)


def command_counts(log: Path) -> Counter[str]:
    return Counter(log.read_text().split()) if log.exists() else Counter()


# -- measurements ------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def raw_sbatch_argv(sbatch: str, uid: int, gid: int, name: str) -> list[str]:
    """The anchor: root's ``sbatch --uid`` of the same tiny job the service submits (the script,
    :data:`TINY_JOB`, on its stdin)."""
    return [
        sbatch,
        "--parsable",
        f"--uid={uid}",
        f"--gid={gid}",
        f"--job-name={name}",
        "--chdir=/tmp",
        "--output=/dev/null",
    ]


@dataclass
class Submitter:
    """Both ways of submitting the same tiny job; ``hold``: submitted held (``--hold`` both ways), so
    that none of them starts while the submissions go on."""

    addr: str
    token: str
    name: str
    env: dict[str, str]
    uid: int
    gid: int
    hold: bool = False

    def spec(self) -> jobs_pb2.JobSpec:
        return jobs_pb2.JobSpec(name=self.name, script=TINY_JOB, hold=self.hold)

    def ours(self, client: ClusterClient) -> float:
        t0 = time.perf_counter()
        client.submit(self.spec())
        return time.perf_counter() - t0

    def raw(self) -> float:
        argv = raw_sbatch_argv("sbatch", self.uid, self.gid, self.name) + (["--hold"] if self.hold else [])
        t0 = time.perf_counter()
        out = subprocess.run(argv, input=TINY_JOB, capture_output=True, text=True, env=self.env, timeout=60)
        elapsed = time.perf_counter() - t0
        if out.returncode != 0 or not out.stdout.strip().split(";")[0].isdigit():
            raise RuntimeError(f"sbatch failed: {out.stderr.strip()}")
        return elapsed


def sequential(sub: Submitter, count: int) -> tuple[list[float], list[float]]:
    """``count`` submissions each way, interleaved (ours, raw, ours, ...), after 3 warm-ups each."""
    ours: list[float] = []
    raw: list[float] = []
    with ClusterClient(sub.addr, sub.token) as client:
        for _ in range(3):
            sub.ours(client)
            sub.raw()
        for _ in range(count):
            ours.append(sub.ours(client))
            raw.append(sub.raw())
    return ours, raw


def concurrent(work: Callable[[int, int], None], clients: int, total: int) -> float:
    """Seconds for ``total`` submissions spread over ``clients`` threads started together
    (``work(i, k)``: client ``i`` submits ``k`` jobs)."""
    per = [total // clients + (1 if i < total % clients else 0) for i in range(clients)]
    barrier = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(i, per[i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} of {clients} clients failed: {errors[0]!r}")
    return elapsed


# -- CPU of the processes a submission passes through ---------------------------------------------

CPU_PARTS = {  # key -> label, in print order
    "clusterd": "our clusterd (with its children)",
    "slurmrestd": "the stack's slurmrestd",
    "slurmctld": "the stack's slurmctld",
    "sbatch": "raw sbatch processes",
    "clients": "the bench's own threads (the clients)",
}


def process_cpu(pid: int) -> float | None:
    """User + system seconds of process ``pid`` and of the children it waited for; None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def pid_file(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class CpuMeter:
    """CPU seconds per part (:data:`CPU_PARTS`) and the machine's idle share over a stretch of the run.

    ``pids``: the processes read from /proc (a None pid: that part is missing and printed as such).
    The bench's own threads and its waited-for children (raw sbatch) come from getrusage, so a
    reading is exact only while nothing else of the bench runs: around a storm's half."""

    pids: dict[str, int | None]

    def read(self) -> dict[str, float | None]:
        out = {part: (process_cpu(pid) if pid is not None else None) for part, pid in self.pids.items()}
        me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        out["clients"] = me.ru_utime + me.ru_stime
        out["sbatch"] = children.ru_utime + children.ru_stime
        with open("/proc/stat") as f:
            jiffies = [int(v) for v in f.readline().split()[1:]]
        out["machine"], out["idle"] = float(sum(jiffies)), float(jiffies[3] + jiffies[4])  # idle + iowait
        return out


@dataclass
class Storm:
    """One way's halves of a concurrent phase, in run order: (jobs, seconds) each, and the CPU the
    parts spent over them (seconds; None: a part that could not be read)."""

    halves: list[tuple[int, float]] = field(default_factory=list)
    cpu: dict[str, float | None] = field(default_factory=dict)

    def add_cpu(self, before: dict[str, float | None], after: dict[str, float | None]) -> None:
        for part, end in after.items():
            start, sofar = before.get(part), self.cpu.get(part, 0.0)
            self.cpu[part] = None if end is None or start is None or sofar is None else sofar + end - start

    def ms_per_job(self, part: str) -> float | None:
        seconds = self.cpu.get(part)
        return None if seconds is None else 1000.0 * seconds / sum(k for k, _ in self.halves)

    @property
    def idle(self) -> float:
        machine, idle = self.cpu.get("machine"), self.cpu.get("idle")
        return (idle or 0.0) / machine if machine else 0.0

    @property
    def rate(self) -> float:
        return sum(k for k, _ in self.halves) / sum(t for _, t in self.halves)

    def half_rates(self) -> list[float]:
        return [k / t for k, t in self.halves]


def concurrent_phase(sub: Submitter, pool: list[ClusterClient], jobs: int, meter: CpuMeter) -> dict[str, Storm]:
    """``jobs`` submissions each way over ``len(pool)`` clients (ours: one ClusterClient each; raw: one
    sbatch at a time each) in two halves, ABBA order. The queue is cleared after each half, and our
    clusterd has recorded the end of every job of ours, so that no half pays for the jobs of another."""

    def ours_work(i: int, k: int) -> None:
        for _ in range(k):
            sub.ours(pool[i])

    def raw_work(i: int, k: int) -> None:
        for _ in range(k):
            sub.raw()

    halves = {"ours": [jobs // 2, jobs - jobs // 2], "raw": [jobs // 2, jobs - jobs // 2]}
    storms = {"ours": Storm(), "raw": Storm()}
    for way in ("ours", "raw", "raw", "ours"):
        k = halves[way].pop()
        before = meter.read()
        storms[way].halves.append((k, concurrent(ours_work if way == "ours" else raw_work, len(pool), k)))
        storms[way].add_cpu(before, meter.read())
        cancel_by_name(sub.name, sub.env)
        wait_queue_clear(sub.name, sub.env)
        wait_settled(pool[0])
    return storms


@dataclass
class Sdiag:
    since: str
    counts: dict[str, int]  # by message type
    users: dict[str, int]  # by user
    micros: dict[str, int] = field(default_factory=dict)  # slurmctld's total_time by message type (µs)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def parse_sdiag(text: str) -> Sdiag:
    """The "Remote Procedure Call statistics by message type" and "by user" blocks of ``sdiag``'s text."""
    since = next((line for line in text.splitlines() if line.startswith("Data since")), "")
    row = r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)(?:\s+ave_time:\d+\s+total_time:(\d+))?"

    def block(title: str) -> list[re.Match[str]]:
        body = text.split(title, 1)[1].split("\n\n", 1)[0] if title in text else ""
        return list(re.finditer(row, body, re.M))

    by_type = block("Remote Procedure Call statistics by message type")
    return Sdiag(
        since,
        {m.group(1): int(m.group(2)) for m in by_type},
        {m.group(1): int(m.group(2)) for m in block("Remote Procedure Call statistics by user")},
        {m.group(1): int(m.group(3)) for m in by_type if m.group(3)},
    )


def sdiag(env: dict[str, str]) -> Sdiag:
    """slurmctld's RPC statistics now (see :func:`parse_sdiag`)."""
    return parse_sdiag(
        subprocess.run(["sdiag"], capture_output=True, text=True, env=env, timeout=30, check=True).stdout
    )


Probe = Callable[[], Counter[str]]


def rpc_window(
    env: dict[str, str], seconds: float, label: str, probe: Probe | None = None
) -> tuple[Counter[str], Counter[str]]:
    """sdiag deltas over ``seconds`` (plus "total"), and the delta of ``probe`` over the same span.

    Measured again when slurmctld restarted meanwhile (someone else may restart the stack).
    """
    for _ in range(5):
        wait_for_slurm(env)
        before, p0 = sdiag(env), probe() if probe else Counter()
        time.sleep(seconds)
        p1 = probe() if probe else Counter()
        try:
            after = sdiag(env)
        except subprocess.CalledProcessError:
            after = Sdiag("", {}, {})
        delta = Counter({k: after.counts.get(k, 0) - v for k, v in before.counts.items()})  # by type
        delta.update({k: v for k, v in after.counts.items() if k not in before.counts})
        delta.update({f"user:{k}": after.users.get(k, 0) - before.users.get(k, 0) for k in after.users})
        if after.since == before.since and all(v >= 0 for v in delta.values()):
            delta["total"] = after.total - before.total
            p1.subtract(p0)
            return delta, p1
        print(f"  ({label}: slurmctld restarted during the window; measuring it again)", file=sys.stderr)
    raise SystemExit(f"{label}: slurmctld restarted during five windows in a row")


@dataclass
class Watchers:
    """``n`` WatchJobs streams, each on its own ClusterClient (its own channel), counting events."""

    addr: str
    token: str
    n: int
    events: list[int] = field(default_factory=list)
    clients: list[ClusterClient] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def start(self) -> None:
        self.events = [0] * self.n
        self.clients = [ClusterClient(self.addr, self.token) for _ in range(self.n)]
        for i in range(self.n):
            t = threading.Thread(target=self._watch, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)

    def _watch(self, i: int) -> None:
        try:
            for _ in self.clients[i].watch():
                self.events[i] += 1
        except Exception as exc:
            self.errors.append(exc)

    def alive(self) -> int:
        return sum(t.is_alive() for t in self.threads)

    def stop(self) -> None:
        for c in self.clients:
            c.close()  # cancels the stream: watch() returns on CANCELLED
        for t in self.threads:
            t.join(10)


def watch_window(
    daemon: Daemon, token: str, sub: Submitter, n: int, seconds: float, tick: float, log: Path
) -> tuple[Counter[str], Counter[str]]:
    """sdiag deltas over one window with ``n`` watchers; and clusterd's own Slurm commands, the
    events each stream received ("stream<i>") and the streams still open ("open") in that window.

    One tiny job is submitted every ``tick`` seconds (the same in every window) so that the
    watchers have events to fan out, not just an idle stream.
    """
    watchers = Watchers(daemon.addr, token, n)
    watchers.start()
    time.sleep(2.0)  # streams open and their initial events delivered
    stop = threading.Event()

    def ticker() -> None:
        with ClusterClient(daemon.addr, token) as client:
            while not stop.wait(tick):
                with contextlib.suppress(Exception):
                    sub.ours(client)

    def probe() -> Counter[str]:
        c = command_counts(log)
        c.update({f"stream{i}": e for i, e in enumerate(watchers.events)})
        return c

    t = threading.Thread(target=ticker, daemon=True)
    t.start()
    try:
        rpcs, seen = rpc_window(sub.env, seconds, f"{n} watcher(s)", probe)
    finally:
        stop.set()
        t.join(30)
    seen["open"] = watchers.alive()
    watchers.stop()
    if watchers.errors:
        raise RuntimeError(f"{len(watchers.errors)} watch stream(s) failed: {watchers.errors[0]!r}")
    return rpcs, seen


def naive_window(
    env: dict[str, str], pollers: int, interval: float, seconds: float, user: pwd.struct_passwd
) -> tuple[Counter[str], int]:
    """``pollers`` threads each running ``squeue --all --json`` as ``user`` every ``interval`` s
    (staggered); sdiag deltas and the number of squeue runs in the window."""
    stop = threading.Event()
    runs = [0] * pollers
    argv = [
        "setpriv",
        f"--reuid={user.pw_uid}",
        f"--regid={user.pw_gid}",
        "--clear-groups",
        "squeue",
        "--all",
        "--json",
    ]

    def poll(i: int) -> None:
        if stop.wait(interval * i / pollers):
            return
        nxt = time.monotonic()
        while not stop.is_set():
            subprocess.run(argv, capture_output=True, env=env, timeout=60)
            runs[i] += 1
            nxt += interval
            stop.wait(max(0.0, nxt - time.monotonic()))

    threads = [threading.Thread(target=poll, args=(i,), daemon=True) for i in range(pollers)]
    for t in threads:
        t.start()
    time.sleep(interval)  # every poller under way before the window opens
    try:
        rpcs, seen = rpc_window(env, seconds, "naive pollers", lambda: Counter(runs=sum(runs)))
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    return rpcs, seen["runs"]


# -- the run -----------------------------------------------------------------------------------


def cpu_total(storm: Storm) -> float:
    """CPU ms per submission over the parts that could be read."""
    return sum(ms for part in CPU_PARTS if (ms := storm.ms_per_job(part)) is not None)


def print_cpu(storms: dict[bool, dict[str, Storm]], clients: int) -> None:
    """Where each way's CPU goes per submission; a part that could not be read says so."""
    print()
    print(f"CPU per submission with {clients} clients (ms, user + system over each way's halves)")
    print(f"{'':40} {'held: ours':>10} {'raw':>7} {'jobs run: ours':>15} {'raw':>7}")

    def cell(storm: Storm, part: str, width: int) -> str:
        ms = storm.ms_per_job(part)
        return f"{'n/a':>{width}}" if ms is None else f"{ms:{width}.2f}"

    for part, label in CPU_PARTS.items():
        cells = [cell(storms[hold][way], part, w) for hold in (True, False) for way, w in (("ours", 10), ("raw", 7))]
        print(f"{label:40} {cells[0]} {cells[1]} {cells[2]:>15} {cells[3]}")
    totals = [f"{cpu_total(storms[hold][way]):.2f}" for hold in (True, False) for way in ("ours", "raw")]
    print(f"{'total of the parts read':40} {totals[0]:>10} {totals[1]:>7} {totals[2]:>15} {totals[3]:>7}")
    idle = [f"{storms[hold][way].idle:.0%}" for hold in (True, False) for way in ("ours", "raw")]
    print(f"{'machine idle (all cores)':40} {idle[0]:>10} {idle[1]:>7} {idle[2]:>15} {idle[3]:>7}")
    ways = [storm for hold in (True, False) for storm in storms[hold].values()]
    missing = sorted({part for storm in ways for part in CPU_PARTS if storm.ms_per_job(part) is None})
    if missing:
        print(f"n/a: {', '.join(missing)} not readable (no pid file under the stack's run/, or the process ended)")


def net(window: Counter[str], idle: Counter[str], key: str) -> int:
    return window.get(key, 0) - idle.get(key, 0)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="~1 minute: 10 s windows, fewer submissions")
    p.add_argument("--window", type=float, help="seconds per sdiag window (default 60; 10 with --quick)")
    p.add_argument("--sequential", type=int, help="sequential submissions each way (default 50; 10 quick)")
    p.add_argument("--concurrent-jobs", type=int, help="jobs each way in the concurrent phase (default 160; 48)")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    p.add_argument("--watchers", type=int, default=100, help="watch streams in the fan-out window (default 100)")
    p.add_argument(
        "--poll-interval",
        type=float,
        default=2.0,
        help="clusterd's poll interval and the naive pollers' interval, seconds (default 2)",
    )
    p.add_argument("--naive-pollers", type=int, default=10, help="squeue --json pollers measured (default 10)")
    p.add_argument("--tick", type=float, default=10.0, help="one job submitted every TICK s in the watch windows")
    p.add_argument("--rounds", type=int, help="interleaved rounds the window is split into (default 3; 1 quick)")
    p.add_argument("--user", default="alice", help="the token's user (default alice)")
    p.add_argument(
        "--backend",
        choices=("auto", "commands", "slurmrestd"),
        default="auto",
        help="the Slurm backend of the submit phases' clusterd (default auto: slurmrestd where the "
        "stack runs one, else sbatch)",
    )
    p.add_argument(
        "--slurm",
        action="append",
        choices=("22.05", "24.11", "26.05"),
        metavar="VER",
        help="the stack of this Slurm release (stack.sh up --slurm VER); repeat to run each and print "
        "the submit figures side by side (default: CLUSTERCTL_STACK_DIR's stack)",
    )
    args = p.parse_args()
    window = args.window or (10.0 if args.quick else 60.0)
    n_seq = args.sequential or (10 if args.quick else 50)
    n_conc = args.concurrent_jobs or (48 if args.quick else 160)
    rounds = args.rounds or (1 if args.quick else 3)

    if os.geteuid() != 0:
        raise SystemExit("run as root: raw sbatch uses --uid, and clusterd runs jobs as the token's user")
    results: dict[str, list[tuple[str, str, str, str]]] = {}
    for version in args.slurm or [None]:
        rows = run_one(args, version, window, n_seq, n_conc, rounds)
        results[version or stack_for(None).slurm_version] = rows
    if len(results) > 1:  # the submit figures of every release side by side
        print()
        print("submit figures per Slurm release (clusterd / raw sbatch / ours/raw)")
        print(f"{'':44} " + " ".join(f"{v:>26}" for v in results))
        for i, (label, *_) in enumerate(next(iter(results.values()))):
            cells = [" / ".join(rows[i][1:]) for rows in results.values()]
            print(f"{label:44} " + " ".join(f"{c:>26}" for c in cells))


def run_one(
    args: argparse.Namespace, version: str | None, window: float, n_seq: int, n_conc: int, rounds: int
) -> list[tuple[str, str, str, str]]:
    """One release's run (the stack of ``--slurm VERSION``): prints its tables, returns the submit rows."""
    stack = stack_for(version)
    env = slurm_env(stack)
    user = pwd.getpwnam(args.user)
    prober = pwd.getpwnam(PROBE_USER)
    name = f"ccbench-{os.getpid()}"
    tmp = Path(tempfile.mkdtemp(prefix="ccbench-"))
    tmp.chmod(0o755)  # the job root is under it: the user's jobs write their output there
    # A burst the submit phases never exhaust (they measure the submit path, not the limiter).
    config, token = write_config(tmp, env["SLURM_CONF"], args.user, stack.slurm_bin, burst=100_000)
    restd = restd_of(stack, args.backend)
    submit_config = (
        config
        if restd is None
        else write_config(tmp, env["SLURM_CONF"], args.user, stack.slurm_bin, restd, token, burst=100_000)[0]
    )
    backend = "slurmrestd" if restd else "commands"
    sub = Submitter("", token, name, env, user.pw_uid, user.pw_gid)
    storms: dict[bool, dict[str, Storm]] = {}  # held jobs or not -> way -> its halves
    started = time.monotonic()
    print(
        f"submit bench: job name {name}, state under {tmp}, window {window:g} s, poll interval "
        f"{args.poll_interval:g} s",
        file=sys.stderr,
    )

    try:
        wait_for_slurm(env)
        # 2. submissions, on a clusterd that runs the real binaries directly
        with running(bench_daemon(stack, env, submit_config, tmp / "submit", args.poll_interval)) as d:
            sub.addr = d.addr
            print(f"[sequential: {n_seq} each way]", file=sys.stderr)
            seq_ours, seq_raw = sequential(sub, n_seq)
            cancel_by_name(name, env)
            wait_queue_clear(name, env)

            pool = [ClusterClient(sub.addr, token) for _ in range(args.clients)]
            for client in pool:
                client.list_jobs(limit=1)  # connected and authenticated before any clock starts
            wait_settled(pool[0])
            print(
                f"[concurrent: {n_conc} each way, {args.clients} clients, 2 halves in ABBA order; held jobs, "
                "then jobs that run]",
                file=sys.stderr,
            )
            run = stack.dir / "run"
            meter = CpuMeter(
                {
                    "clusterd": d.proc.pid if d.proc else None,
                    "slurmrestd": pid_file(run / "slurmrestd.pid"),
                    "slurmctld": pid_file(run / "slurmctld.pid"),
                }
            )
            for hold in (True, False):
                storms[hold] = concurrent_phase(replace(sub, hold=hold), pool, n_conc, meter)
            for client in pool:
                client.close()

        # 3. slurmctld's load, in interleaved rounds (ABBA order) so that the background's drift (the
        # stack's own clusterd, other users) spreads over every condition: idle and the naive pollers
        # with no clusterd of ours running; 1 and N watchers on a clusterd whose commands are counted.
        cmd_log = tmp / "commands.log"
        make_wrappers(tmp / "bin", cmd_log, prober, env["PATH"])
        wd = bench_daemon(
            stack,
            env,
            config,
            tmp / "watch",
            args.poll_interval,
            extra_env={"CLUSTERD_SLURM__BIN_DIR": str(tmp / "bin")},
        )
        sub_window = window / rounds
        idle, naive, w1, wn, c1, cn = (Counter[str]() for _ in range(6))
        naive_runs = 0

        def watched() -> None:
            with running(wd):
                sub.addr = wd.addr
                time.sleep(args.poll_interval * 2)  # start-up polls (topology, partitions) out of the windows
                for n in (1, args.watchers) if r % 2 == 0 else (args.watchers, 1):
                    rpcs, seen = watch_window(wd, token, sub, n, sub_window, args.tick, cmd_log)
                    (w1 if n == 1 else wn).update(rpcs)
                    (c1 if n == 1 else cn).update(seen)
            cancel_by_name(name, env)

        def unwatched() -> None:
            nonlocal naive_runs
            for step in ("idle", "naive") if r % 2 == 0 else ("naive", "idle"):
                if step == "idle":
                    idle.update(rpc_window(env, sub_window, "idle")[0])
                else:
                    rpcs, runs = naive_window(env, args.naive_pollers, args.poll_interval, sub_window, prober)
                    naive.update(rpcs)
                    naive_runs += runs

        for r in range(rounds):
            print(
                f"[round {r + 1}/{rounds}: idle, {args.naive_pollers} naive pollers, 1 and {args.watchers} "
                f"watchers, {sub_window:g} s each]",
                file=sys.stderr,
            )
            for part in (unwatched, watched) if r % 2 == 0 else (watched, unwatched):
                part()
    finally:
        cancel_by_name(name, env)
    shutil.rmtree(tmp, ignore_errors=True)  # kept (with clusterd.log) when the run failed
    elapsed = time.monotonic() - started

    # -- the table --
    ms = 1000.0
    rows: list[tuple[str, str, str, str]] = []
    o50, r50 = statistics.median(seq_ours) * ms, statistics.median(seq_raw) * ms
    o95, r95 = percentile(seq_ours, 95) * ms, percentile(seq_raw, 95) * ms
    rows.append((f"submit latency p50 (ms, n={n_seq})", f"{o50:.1f}", f"{r50:.1f}", ratio(o50, r50)))
    rows.append((f"submit latency p95 (ms, n={n_seq})", f"{o95:.1f}", f"{r95:.1f}", ratio(o95, r95)))
    for hold, label in ((True, "held jobs"), (False, "jobs run")):
        ours, raw = storms[hold]["ours"].rate, storms[hold]["raw"].rate
        rows.append(
            (
                f"submissions/s, {args.clients} clients, {label} ({n_conc})",
                f"{ours:.1f}",
                f"{raw:.1f}",
                ratio(ours, raw),
            )
        )
        ours_ms, raw_ms = cpu_total(storms[hold]["ours"]), cpu_total(storms[hold]["raw"])
        rows.append((f"CPU ms per submission, {label}", f"{ours_ms:.2f}", f"{raw_ms:.2f}", ratio(ours_ms, raw_ms)))

    print()
    print(
        f"submit bench on the local stack, Slurm {stack.slurm_version}, clusterd's backend {backend}: {name}, "
        f"{elapsed:.0f} s"
    )
    print(f"{'':44} {'clusterd':>10} {'raw sbatch':>11} {'ours/raw':>9}")
    for label, a, b, c in rows:
        print(f"{label:44} {a:>10} {b:>11} {c:>9}")
    for hold, label in ((True, "held jobs"), (False, "jobs run")):
        (o1, o2), (r1, r2) = storms[hold]["ours"].half_rates(), storms[hold]["raw"].half_rates()
        print(
            f"{args.clients} clients, {label}: submissions/s per half in run order (ABBA): ours {o1:.0f}, "
            f"raw {r1:.0f}, raw {r2:.0f}, ours {o2:.0f}"
        )
    print_cpu(storms, args.clients)

    scale = args.watchers / args.naive_pollers
    nw, npl = args.watchers, args.naive_pollers
    print()
    print(
        f"slurmctld RPCs (sdiag) per {window:g} s ({rounds} x {window / rounds:g} s, interleaved), poll interval "
        f"{args.poll_interval:g} s: measured, then net of idle (naive scaled from {npl} pollers)"
    )
    print(
        f"{'':24} {'idle':>6} {'1w':>6} {f'{nw}w':>6} {f'{npl} naive':>9} | {'ours 1w':>8} {f'ours {nw}w':>9} "
        f"{f'{nw}w/1w':>7} {'naive 1':>8} {f'naive {nw}':>9} {'naive/ours':>10}"
    )
    exact = f"user:{PROBE_USER}"
    for key in (*RPC_TYPES, "REQUEST_SUBMIT_BATCH_JOB", "total", exact):
        o1, on = net(w1, idle, key), net(wn, idle, key)
        nv = net(naive, idle, key)
        n1, nn = f"{nv / npl:.0f}", f"{nv * scale:.0f}"
        last = ratio(nv * scale, on)
        if key == "REQUEST_SUBMIT_BATCH_JOB":  # the ticker's jobs; the pollers submit nothing
            n1 = nn = last = "-"
        label = f"all, as {PROBE_USER} (exact)" if key == exact else key
        print(
            f"{label:24} {idle.get(key, 0):>6} {w1.get(key, 0):>6} {wn.get(key, 0):>6} {naive.get(key, 0):>9} | "
            f"{o1:>8} {on:>9} {ratio(on, o1):>7} {n1:>8} {nn:>9} {last:>10}"
        )
    print()
    cmd = " ".join(f"{k} {c1.get(k, 0)}/{cn.get(k, 0)}" for k in SLURM_COMMANDS if c1.get(k, 0) or cn.get(k, 0))
    print(f"clusterd's own Slurm commands, 1w/{args.watchers}w (wrapped bin_dir): {cmd}")
    e1 = [v for k, v in c1.items() if k.startswith("stream")]
    en = [v for k, v in cn.items() if k.startswith("stream")]
    print(
        f"watch streams open at the end of their windows: {c1['open']}/{rounds} and {cn['open']}/"
        f"{rounds * args.watchers}; events per stream over the windows (min/median): {min(e1)}/"
        f"{statistics.median(e1):g} with 1 watcher, {min(en)}/{statistics.median(en):g} with {args.watchers}"
    )
    print(
        f"'as {PROBE_USER}': sdiag's per-user count of the watching side alone (clusterd's squeue/sinfo/scontrol "
        f"show and the naive pollers run as {PROBE_USER}), immune to other users of slurmctld"
    )
    print(
        f"naive: {args.naive_pollers} pollers ran squeue --json {naive_runs} times in {window:g} s; "
        f"'naive 1' and 'naive {args.watchers}' are that net count /{args.naive_pollers} and x{scale:g}"
    )
    print(
        f"background (idle window, no clusterd of ours): {idle.get('total', 0)} RPCs; "
        f"per type: {', '.join([f'{k} {v}' for k, v in idle.most_common() if k != 'total' and ':' not in k][:6])}"
    )
    return rows


if __name__ == "__main__":
    main()
