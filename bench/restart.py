"""Restart bench: from a requeued job's batch script starting to its first training step.

    python -m bench.restart                   # hidden 64 (the tests' job) and 2048 (~16 MiB), 7 runs each
    python -m bench.restart --hidden 64 --runs 9

What one restart costs on the critical path, phase by phase, for the real ``examples/train.py``
resuming from a committed checkpoint: the environment line clusterd puts in a command
submission's batch script (bash), then in a fresh Python process: interpreter start, ``import
numpy``, ``import clusterctl.checkpoint``, ``CheckpointManager(...)``, ``restore()`` (its storage
requests listed by kind), the first ``STEP`` line, and the arrival of the first-step heartbeat at
a fake JobService (tests/support/heartbeat.py). The script runs unchanged under a small driver
that times those points (``time.monotonic``, shared by the processes of one machine); the same
runs with heartbeats off are timed too.

Anchor, measured in the same run (alternating with ours) on the same arrays: a fresh process that
imports numpy and boto3, makes an S3 client, fetches the arrays saved by ``np.savez`` with ONE
``get_object`` and ``np.load``s them. In-process rows compare a warm ``restore()`` with a warm GET
plus ``np.load`` (and ``torch.load`` of the same tensors when torch is installed). S3: the AWS_*
variables when AWS_ENDPOINT_URL is set (``--bucket``, default $CLUSTERCTL_BUCKET), else a private
SeaweedFS (tests/support/s3server.py). Absolute times on a shared 2-core machine are noise; the
ratios are the result. Another checkout is measured with its own PYTHONPATH and ``--examples``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.checkpoint import print_rows
from tests.support.heartbeat import FakeJobService, heartbeat_env, serve
from tests.support.paths import ROOT
from tests.support.s3server import get_server

Row = tuple[str, str, str, str, str]

# Runs examples/train.py in this process, timing the points of the restart path. argv[1]: JSON args.
DRIVER = r"""
import time
T = {"start": time.monotonic()}
import builtins, json, os, runpy, sys
args = json.loads(sys.argv[1])
import numpy
T["numpy"] = time.monotonic()
import clusterctl.checkpoint
T["import"] = time.monotonic()
T["aws_at_import"] = "botocore" in sys.modules
T["pid"] = os.getpid()
from clusterctl.checkpoint import manager

calls = []
init, restore, show = manager.CheckpointManager.__init__, manager.CheckpointManager.restore, builtins.print

def timed(name, fn):
    def wrapper(*a, **k):
        t0 = time.monotonic()
        try:
            return fn(*a, **k)
        finally:
            key = a[0] if a and isinstance(a[0], str) else ""
            calls.append((name, key, t0, time.monotonic()))
    return wrapper

def new_init(self, *a, **k):
    init(self, *a, **k)
    T["manager"] = time.monotonic()
    for name in ("list_objects", "get", "read_into", "stat"):
        setattr(self.storage, name, timed(name, getattr(self.storage, name)))

def new_restore(self, *a, **k):
    T["restore0"] = time.monotonic()
    out = restore(self, *a, **k)
    T["restore"] = time.monotonic()
    return out

def new_print(*a, **k):
    show(*a, **k)
    if a and str(a[0]).startswith("STEP ") and "step" not in T:
        T["step"] = time.monotonic()
    if a and str(a[0]).startswith("RESUMED "):
        T["resumed_line"] = str(a[0])

manager.CheckpointManager.__init__, manager.CheckpointManager.restore = new_init, new_restore
builtins.print = new_print
sys.argv = [args["train"], *args["argv"]]
try:
    runpy.run_path(args["train"], run_name="__main__")
except SystemExit:
    pass
T["calls"] = calls
with open(args["out"], "w") as f:
    json.dump(T, f)
"""

# The anchor: a fresh process, one GET of the np.savez'd arrays, np.load. argv[1]: JSON args.
ANCHOR = r"""
import time
T = {"start": time.monotonic()}
import io, json, sys
args = json.loads(sys.argv[1])
import numpy as np
T["numpy"] = time.monotonic()
import boto3
from botocore.config import Config
T["boto3"] = time.monotonic()
client = boto3.client("s3", endpoint_url=args["endpoint"], config=Config(s3={"addressing_style": "path"}))
T["client"] = time.monotonic()
body = client.get_object(Bucket=args["bucket"], Key=args["key"])["Body"].read()
T["get"] = time.monotonic()
state = dict(np.load(io.BytesIO(body)))
T["load"] = time.monotonic()
with open(args["out"], "w") as f:
    json.dump(T, f)
"""


def child_env(env: dict[str, str]) -> dict[str, str]:
    out = {**os.environ, **env, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    for name in [k for k in out if k.startswith(("SLURM_", "CLUSTERCTL_HEARTBEAT"))]:
        del out[name]  # a bench run is not a rank of the Slurm job that may be running it
    return out


def run_json(code: str, args: dict[str, Any], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    """Start ``python -c code``; returns (monotonic time just before the exec, what it wrote)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = tmp.name
    try:
        t0 = time.monotonic()
        subprocess.run(
            [sys.executable, "-c", code, json.dumps({**args, "out": out})],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=300,
        )
        return t0, json.loads(Path(out).read_text())
    finally:
        os.unlink(out)


def prelude_line(uri: str) -> str:
    """The environment line clusterd injects into the batch script of a command submission."""
    from clusterd.jobs.script import command_script, inject_environment, job_environment

    script = inject_environment(
        command_script(["python3", "train.py"]), job_environment({}, record_id=1, checkpoint_uri=uri)
    )
    return next(line for line in script.splitlines() if line.endswith("# environment added by clusterd"))


def timed_bash(line: str, env: dict[str, str]) -> float:
    t0 = time.monotonic()
    subprocess.run(["bash", "-c", line], env=env, check=True, stdout=subprocess.DEVNULL, timeout=120)
    return time.monotonic() - t0


def spans(calls: list[list[Any]], t0: float, t1: float) -> float:
    """Wall time within [t0, t1] covered by at least one of the calls (overlaps counted once)."""
    total, end = 0.0, t0
    for _, _, a, b in sorted(calls, key=lambda c: c[2]):
        a, b = max(a, end), min(b, t1)
        if b > a:
            total += b - a
            end = b
    return total


def request_kind(name: str, key: str) -> str:
    if name == "list_objects":
        return "LIST commits/" if key.startswith("commits") else "LIST step (structure check)"
    if name == "get":
        return "GET marker" if key.startswith("commits") else "GET manifest"
    if name == "read_into":
        return "GET shard ranges"
    return "HEAD"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def run_size(hidden: int, opts: argparse.Namespace, env: dict[str, str], bucket: str) -> list[Row]:
    import boto3
    import numpy as np
    from botocore.config import Config

    from clusterctl.checkpoint import CheckpointManager

    prefix = f"bench/restart/{uuid.uuid4().hex[:8]}"
    uri = f"s3://{bucket}/{prefix}/ckpt"
    train = str(Path(opts.examples) / "train.py")
    steps = 10
    cenv = child_env(env)
    subprocess.run(
        [sys.executable, train, "--ckpt", uri, "--steps", str(steps), "--every", str(steps), "--hidden", str(hidden)],
        env=cenv,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=600,
    )
    os.environ.update(env)
    ckpt = CheckpointManager(uri)
    state = ckpt.restore()
    assert state is not None and ckpt.last_restored_step == steps - 1
    params = {k: np.asarray(v) for k, v in state["params"].items()}
    client = boto3.client(
        "s3", endpoint_url=env.get("AWS_ENDPOINT_URL"), config=Config(s3={"addressing_style": "path"})
    )
    buf = io.BytesIO()
    np.savez(buf, **params)
    key = f"{prefix}/anchor/state.npz"
    client.put_object(Bucket=bucket, Key=key, Body=buf.getvalue())
    nbytes = sum(a.nbytes for a in params.values())

    line = prelude_line(uri)
    argv = ["--ckpt", uri, "--steps", str(steps + 1), "--every", "1000000", "--hidden", str(hidden)]
    ours: list[dict[str, Any]] = []
    bare: list[dict[str, Any]] = []
    anchors: list[dict[str, Any]] = []
    preludes: list[float] = []
    sock = Path(tempfile.mkdtemp(prefix="ccbench-hb-")) / "hb.sock"
    service = FakeJobService()
    beating = {**cenv, **heartbeat_env(sock, SLURM_PROCID="0", SLURM_NTASKS="1", CLUSTERCTL_HEARTBEAT_INTERVAL="1")}
    with serve(sock, service):
        for _ in range(opts.runs):  # alternate, so all three see the same background load
            preludes.append(timed_bash(line, cenv))
            t0, got = run_json(DRIVER, {"train": train, "argv": argv}, beating)
            ours.append({**got, "exec": t0})
            t0, got = run_json(DRIVER, {"train": train, "argv": argv}, {**cenv, "CLUSTERCTL_HEARTBEAT": "0"})
            bare.append({**got, "exec": t0})
            t0, got = run_json(ANCHOR, {"endpoint": env.get("AWS_ENDPOINT_URL"), "bucket": bucket, "key": key}, cenv)
            anchors.append({**got, "exec": t0})
    for run in ours:
        assert "RESUMED from step" in run.get("resumed_line", ""), run.get("resumed_line")
        try:
            run["beat"], _ = service.wait_for(lambda b, pid=run["pid"]: b.pid == pid and b.step == steps, timeout=1)
        except AssertionError:  # a checkout without the heartbeat client: time the STEP line instead
            run["beat"] = None
    beats = all(r["beat"] is not None for r in ours)
    if not beats:
        for r in ours:
            r["beat"] = r["step"]

    def phase(runs: list[dict[str, Any]], a: str, b: str) -> float:
        return median([r[b] - r[a] for r in runs])

    rows: list[Row] = []
    aws = "botocore in" if all(r["aws_at_import"] for r in ours) else "no botocore"
    anchor_total = median([r["load"] - r["exec"] for r in anchors])
    for metric, value, anchor in [
        ("batch script env line (bash)", median(preludes), None),
        ("python start", phase(ours, "exec", "start"), f"{ms(phase(anchors, 'exec', 'start'))}"),
        ("import numpy", phase(ours, "start", "numpy"), f"{ms(phase(anchors, 'start', 'numpy'))}"),
        (
            f"import clusterctl.checkpoint ({aws})",
            phase(ours, "numpy", "import"),
            f"import boto3 {ms(phase(anchors, 'numpy', 'boto3'))}",
        ),
        (
            "CheckpointManager(uri)",
            phase(ours, "import", "manager"),
            f"boto3.client {ms(phase(anchors, 'boto3', 'client'))}",
        ),
        ("  (train.py between init and restore)", phase(ours, "manager", "restore0"), None),
        ("restore()", phase(ours, "restore0", "restore"), f"GET+np.load {ms(phase(anchors, 'client', 'load'))}"),
    ]:
        rows.append((metric, ms(value), anchor or "-", "", ""))
    kinds: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    for r in ours:
        inside = [c for c in r["calls"] if r["restore0"] <= c[2] <= r["restore"]]
        per: dict[str, list[list[Any]]] = {}
        for c in inside:
            per.setdefault(request_kind(c[0], c[1]), []).append(c)
        per["requests in flight (union)"] = inside
        for kind, cs in per.items():
            kinds.setdefault(kind, []).append(spans(cs, r["restore0"], r["restore"]))
            counts.setdefault(kind, []).append(len(cs))
    for kind in sorted(kinds, key=lambda k: (k.startswith("requests"), k)):
        rows.append((f"  {kind} x{max(counts[kind])}", ms(median(kinds[kind])), "", "", ""))
    rows.append(("first step (restore returned -> STEP line)", ms(phase(ours, "restore", "step")), "-", "", ""))
    if beats:
        rows.append(("first-step heartbeat arrives at the service", ms(phase(ours, "step", "beat")), "-", "", ""))
    else:
        rows.append(("first-step heartbeat arrives at the service", "-", "no beats (no heartbeat client)", "", ""))
    total = median([p + r["beat"] - r["exec"] for p, r in zip(preludes, ours, strict=True)])
    what = "beat" if beats else "line"
    rows.append(
        (
            f"TOTAL: script start -> first-step {what} / fresh process -> arrays",
            ms(total),
            ms(anchor_total),
            f"{total / anchor_total:.2f}x",
            "(lower = faster)",
        )
    )
    for label, runs in (("heartbeats on", ours), ("heartbeats off", bare)):
        python = median([r["restore"] - r["exec"] for r in runs])
        rows.append(
            (
                f"  exec -> restored state, {label}",
                ms(python),
                ms(anchor_total),
                f"{python / anchor_total:.2f}x",
                "(lower = faster)",
            )
        )
    off = median([r["step"] - r["exec"] for r in bare])
    rows.append(("  exec -> first STEP line, heartbeats off", ms(off), "-", "", ""))

    # --- in-process, warm: restore() against one GET + np.load / torch.load of the same arrays ---
    warm, plain = [], []
    for _ in range(opts.runs):
        t0 = time.perf_counter()
        ckpt.restore()
        warm.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        dict(np.load(io.BytesIO(client.get_object(Bucket=bucket, Key=key)["Body"].read())))
        plain.append(time.perf_counter() - t0)
    rows.append(
        (
            "warm restore() / GET + np.load (in process)",
            ms(median(warm)),
            ms(median(plain)),
            f"{median(warm) / median(plain):.2f}x",
            "<= 1.0x",
        )
    )
    try:
        import torch
    except ImportError:
        rows.append(("warm restore() / GET + torch.load", "-", "anchor missing (no torch)", "-", "-"))
    else:
        tbuf = io.BytesIO()
        torch.save({k: torch.from_numpy(v) for k, v in params.items()}, tbuf)
        tkey = f"{prefix}/anchor/state.pt"
        client.put_object(Bucket=bucket, Key=tkey, Body=tbuf.getvalue())
        tload = []
        for _ in range(opts.runs):
            t0 = time.perf_counter()
            torch.load(io.BytesIO(client.get_object(Bucket=bucket, Key=tkey)["Body"].read()), weights_only=True)
            tload.append(time.perf_counter() - t0)
        rows.append(
            (
                "warm restore() / GET + torch.load (in process)",
                ms(median(warm)),
                ms(median(tload)),
                f"{median(warm) / median(tload):.2f}x",
                "<= 1.0x",
            )
        )
    ckpt.close()
    # clean up: the checkpoint and the anchors
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in page.get("Contents", [])
    ]
    for i in range(0, len(keys), 1000):
        client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]})
    print_rows(
        f"restart bench: examples/train.py --hidden {hidden} ({nbytes / (1 << 20):.2f} MiB of arrays), "
        f"{opts.runs} runs (medians)",
        rows,
    )
    return rows


def components(opts: argparse.Namespace, env: dict[str, str]) -> list[Row]:
    """Cost of each import alone in a fresh interpreter (medians), for reading the phase table."""
    cenv = child_env(env)
    rows: list[Row] = []
    base: list[float] = []
    for what in (
        "pass",
        "import numpy",
        "import boto3",
        "import grpc",
        "import clusterctl.checkpoint",
        "import clusterctl.heartbeat",
    ):
        times = []
        for _ in range(opts.runs):
            t0 = time.monotonic()
            done = subprocess.run([sys.executable, "-c", what], env=cenv, capture_output=True, timeout=120)
            times.append(time.monotonic() - t0)
            if done.returncode:
                times = []
                break
        if what == "pass":
            base = times
            rows.append(("python -c pass", ms(median(times)), "", "", ""))
        elif times:
            rows.append((f"python -c '{what}' - pass", ms(median(times) - median(base)), "", "", ""))
        else:
            rows.append((f"python -c '{what}'", "-", "not importable here", "", ""))
    print_rows(f"fresh interpreter import costs, {opts.runs} runs (medians)", rows)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, nargs="+", default=[64, 2048], help="train.py --hidden sizes")
    ap.add_argument("--runs", type=int, default=7, help="runs per phase (median); at least 5")
    ap.add_argument("--bucket", default=None, help="bucket with AWS_ENDPOINT_URL (default $CLUSTERCTL_BUCKET)")
    ap.add_argument("--examples", default=str(ROOT / "examples"), help="directory holding train.py")
    opts = ap.parse_args()
    if opts.runs < 5:
        ap.error("--runs must be at least 5")
    if os.environ.get("AWS_ENDPOINT_URL"):
        env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
        bucket = opts.bucket or os.environ.get("CLUSTERCTL_BUCKET") or "clusterctl"
    else:
        server = get_server()
        env, bucket = server.env(), server.bucket
    components(opts, env)
    for hidden in opts.hidden:
        run_size(hidden, opts, env, bucket)


if __name__ == "__main__":
    main()
