"""Checkpoint benchmark: one run, the same float32 state, N ranks as processes, ratios vs anchors.

    python -m bench.checkpoint                 # 1 GiB total, 2 ranks, private SeaweedFS, tmp dir
    python -m bench.checkpoint --size-gib 0.25 --repeats 2
    python -m bench.checkpoint --s3 ceph       # Ceph's RADOS Gateway (deploy/local/ceph-s3.sh up)

S3: with --s3 ceph, the gateway ceph-s3.sh runs (tests/support/cephs3.py); else the AWS_* variables
when AWS_ENDPOINT_URL is set (plus --bucket), else a private SeaweedFS started from
tests/support/s3server.py on 127.0.0.1; s5cmd runs against the same server. Anchors, measured in
the same run on the same data: np.copyto into a warm buffer (the snapshot floor), np.savez + boto3
upload (the naive way), s5cmd cp up and down (if on PATH), torch.distributed.checkpoint.async_save
(if torch is installed). Absolute numbers on a shared 2-core machine are noise; the ratios are the
result.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from bench.anchors import find_tool, missing
from tests.support.cephs3 import CephS3
from tests.support.ports import free_port
from tests.support.s3server import get_seaweed

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class RssPeak:
    """Samples RSS every 5 ms in a thread; ``peak`` is the highest value seen."""

    def __init__(self) -> None:
        self.peak = rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss())
            time.sleep(0.005)

    def __enter__(self) -> RssPeak:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, rss())


def cpu_loop(seconds: float, until: threading.Event | None = None) -> float:
    """Steps/s of a small CPU-bound numpy loop (a stand-in for a training step)."""
    a = np.random.default_rng(0).standard_normal((160, 160)).astype(np.float32)
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(10):
            a = np.tanh(a @ a.T * 0.01)
        n += 10
        elapsed = time.perf_counter() - t0
        if (until is not None and until.is_set()) or (until is None and elapsed >= seconds):
            return n / elapsed


def make_state(rank: int, nbytes: int, arrays: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(rank)
    per = nbytes // 4 // arrays
    return {f"layer{i:02d}": rng.standard_normal(per, dtype=np.float32) for i in range(arrays)}


def worker(rank: int, world: int, args: dict[str, Any], barrier: Any, out: Any) -> None:
    os.environ.update(args["env"])
    os.environ.update(
        {
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(world),
            "SLURM_JOB_ID": args["job"],
            "SLURM_STEP_ID": "0",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
        }
    )
    import boto3
    from botocore.config import Config

    from clusterctl.checkpoint import CheckpointConfig, CheckpointManager

    res: dict[str, Any] = {"rank": rank}
    state = make_state(rank, args["bytes_per_rank"])
    nbytes = sum(a.nbytes for a in state.values())
    res["bytes"] = nbytes
    reps = args["repeats"]

    # --- floor: np.copyto into a warm preallocated buffer -----------------------------------
    dst = {k: np.empty_like(v) for k, v in state.items()}
    for k, v in state.items():
        np.copyto(dst[k], v)
    times = []
    for _ in range(reps):
        barrier.wait()
        t0 = time.perf_counter()
        for k, v in state.items():
            np.copyto(dst[k], v)
        times.append(time.perf_counter() - t0)
    res["copyto_s"] = statistics.median(times)
    del dst

    # --- ours to S3 -------------------------------------------------------------------------
    cfg = CheckpointConfig(part_size=args["part_mib"] << 20, max_concurrency=args["concurrency"], gc_on_commit=False)
    ckpt = CheckpointManager(f"s3://{args['bucket']}/{args['prefix']}/ours", keep=2, config=cfg)
    barrier.wait()
    base = rss()
    with RssPeak() as peak:
        t0 = time.perf_counter()
        h = ckpt.save(0, state)
        res["ours_cold_block_s"] = time.perf_counter() - t0
        h.result()
        res["ours_cold_e2e_s"] = time.perf_counter() - t0
    res["rss_extra_cold"] = peak.peak - base
    res["rss_total_cold"] = peak.peak
    blocks, e2es, extra = [], [], []
    for step in range(1, reps + 1):
        barrier.wait()
        base = rss()
        with RssPeak() as peak:
            t0 = time.perf_counter()
            h = ckpt.save(step, state)
            blocks.append(time.perf_counter() - t0)
            h.result()
            e2es.append(time.perf_counter() - t0)
        extra.append(peak.peak - base)
    res["ours_block_s"], res["ours_e2e_s"] = statistics.median(blocks), statistics.median(e2es)
    res["rss_extra_steady"] = max(extra)
    res["rss_total_steady"] = rss()

    # --- training loop while an upload runs, vs idle ---------------------------------------
    barrier.wait()
    res["loop_idle"] = cpu_loop(2.0)
    barrier.wait()
    h = ckpt.save(reps + 1, state)
    done = threading.Event()
    threading.Thread(target=lambda: (h.result(), done.set()), daemon=True).start()
    res["loop_busy"] = cpu_loop(0, until=done)

    # the same against a local directory: no S3 server process competing for these 2 cores
    local = CheckpointManager(str(Path(args["local_dir"]) / "loop"), keep=1, config=cfg)
    local.save(0, state).result()
    barrier.wait()
    h = local.save(1, state)
    done_local = threading.Event()
    threading.Thread(target=lambda: (h.result(), done_local.set()), daemon=True).start()
    res["loop_busy_local"] = cpu_loop(0, until=done_local)
    local.close()

    # --- restore with verification ------------------------------------------------------------
    times = []
    for _ in range(reps):
        barrier.wait()
        t0 = time.perf_counter()
        restored = ckpt.restore()
        times.append(time.perf_counter() - t0)
        assert np.array_equal(restored["layer00"], state["layer00"])
        del restored
    res["ours_restore_s"] = statistics.median(times)
    ckpt.close()

    # --- naive: np.savez + boto3 upload, synchronous ------------------------------------------
    client = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
    times = []
    for i in range(reps):
        barrier.wait()
        t0 = time.perf_counter()
        buf = io.BytesIO()
        np.savez(buf, **state)
        buf.seek(0)
        client.upload_fileobj(buf, args["bucket"], f"{args['prefix']}/naive/{i}/rank{rank}.npz")
        times.append(time.perf_counter() - t0)
        del buf
    res["naive_block_s"] = statistics.median(times)

    # --- s5cmd up/down of the same bytes --------------------------------------------------------
    s5 = find_tool("s5cmd")
    if s5:
        shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
        local = shm / f"bench-{args['job']}-rank{rank}.bin"
        with open(local, "wb") as f:
            for v in state.values():
                f.write(v.data)
        up, down = [], []
        s5env = {**os.environ}
        for i in range(reps):
            key = f"s3://{args['bucket']}/{args['prefix']}/s5cmd/{i}/rank{rank}.bin"
            barrier.wait()
            t0 = time.perf_counter()
            subprocess.run(
                [s5, "--endpoint-url", os.environ["AWS_ENDPOINT_URL"], "cp", str(local), key],
                check=True,
                capture_output=True,
                env=s5env,
            )
            up.append(time.perf_counter() - t0)
            barrier.wait()
            t0 = time.perf_counter()
            subprocess.run(
                [s5, "--endpoint-url", os.environ["AWS_ENDPOINT_URL"], "cp", key, f"{local}.down"],
                check=True,
                capture_output=True,
                env=s5env,
            )
            down.append(time.perf_counter() - t0)
            os.unlink(f"{local}.down")
        os.unlink(local)
        res["s5cmd_up_s"], res["s5cmd_down_s"] = statistics.median(up), statistics.median(down)

    # --- torch.distributed.checkpoint async_save vs ours, same local directory ------------------
    try:
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
    except ImportError:
        torch = None  # type: ignore[assignment]
    if torch is not None:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args['port']}", rank=rank, world_size=world)
        tstate = {f"rank{rank}.{k}": torch.from_numpy(v) for k, v in state.items()}
        local_dir = Path(args["local_dir"])
        blocks, e2es = [], []
        for i in range(reps + 1):  # first one warms DCP's staging
            barrier.wait()
            t0 = time.perf_counter()
            fut = dcp.async_save(tstate, checkpoint_id=str(local_dir / "dcp" / str(i)))
            blocks.append(time.perf_counter() - t0)
            (fut.result() if hasattr(fut, "result") else fut.upload_completion.result())
            e2es.append(time.perf_counter() - t0)
        res["dcp_block_s"], res["dcp_e2e_s"] = statistics.median(blocks[1:]), statistics.median(e2es[1:])
        ckpt = CheckpointManager(str(local_dir / "ours"), keep=2, config=cfg)
        ckpt.save(0, state).result()  # warm staging
        blocks, e2es = [], []
        for i in range(1, reps + 1):
            barrier.wait()
            t0 = time.perf_counter()
            h = ckpt.save(i, state)
            blocks.append(time.perf_counter() - t0)
            h.result()
            e2es.append(time.perf_counter() - t0)
        res["local_block_s"], res["local_e2e_s"] = statistics.median(blocks), statistics.median(e2es)
        ckpt.close()
        dist.destroy_process_group()
    out.put(res)


# --- FSDP2 side by side with torch.distributed.checkpoint (local directory, gloo on CPU) ---------


def rchar() -> int:
    """Bytes this process read through read()/pread() so far (/proc/self/io), for both libraries."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def fsdp_model(torch: Any, nbytes: int, mesh: Any) -> Any:
    """Linear layers of float32 totalling about ``nbytes``, each and the root under FSDP2 fully_shard."""
    from torch.distributed.fsdp import fully_shard

    width = 1024
    layers = max(1, nbytes // (width * width * 4))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    for layer in model:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def fsdp_worker(rank: int, world: int, args: dict[str, Any], barrier: Any, out: Any) -> None:
    """One rank of one FSDP phase: ``save`` (world 2) or ``load`` (any world, from the saved dirs).

    The model and its AdamW optimizer (after one step: ``exp_avg``, ``exp_avg_sq``, scalar ``step``)
    are saved as they are held, ``{"model": model, "optim": optim}``, and DCP is given the same
    through torch's state-dict API (``get_state_dict``, then ``set_state_dict`` after ``dcp.load``),
    inside the timed region on both sides. Saves also time, in the same rounds, ``async_save`` with a
    stager kept across saves and a plain ``copy_`` of the rank's bytes into a warm buffer (the floor),
    and count the CPU time (of the calling thread) and minor page faults of each blocking call.
    """
    os.environ.update({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    from clusterctl.checkpoint import CheckpointConfig, CheckpointManager, Replicated

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args['port']}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    model = fsdp_model(torch, args["bytes"], mesh)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    held = {"model": model, "optim": optim}
    root = Path(args["dir"])
    cfg = CheckpointConfig(gc_on_commit=False, run_id=f"fsdp{world}", background_nice=0)

    def local_tensors() -> list[Any]:
        """This rank's pieces of the model and optimizer state (AdamW's step is a plain tensor)."""
        msd, osd = get_state_dict(model, optim)
        tensors = [*msd.values(), *(t for s in osd["state"].values() for t in s.values())]
        return [t.to_local() if hasattr(t, "to_local") else t for t in tensors]

    def local_bytes() -> int:
        return sum(t.nbytes for t in local_tensors())

    reps = args["repeats"]
    with CheckpointManager(str(root / "ours"), keep=0, config=cfg) as ckpt:
        if args["phase"] == "save":
            model(torch.randn(4, 1024)).sum().backward()
            optim.step()
            res: dict[str, Any] = {"rank": rank, "needed": local_bytes()}
            # DCP at its best: a stager kept across saves reuses its staging memory (keyed by the
            # source storages), as our staging pool does; async_save's own stager is new at every call
            stager = DefaultStager(StagingOptions(False, False, False, False))
            sources = [t.reshape(-1).view(torch.uint8) for t in local_tensors()]
            floor_buf = torch.ones(sum(t.numel() for t in sources), dtype=torch.uint8)  # warm pages
            timings: dict[str, list[tuple[float, float, float, int]]] = {}  # blocking s, e2e s, CPU s, faults

            def ours(i: int) -> Any:
                return ckpt.save(i, held)

            def theirs(i: int) -> Any:
                msd, osd = get_state_dict(model, optim)
                return dcp.async_save({"model": msd, "optim": osd}, checkpoint_id=str(root / "dcp" / str(i)))

            def theirs_warm(i: int) -> Any:
                msd, osd = get_state_dict(model, optim)
                sd = {"model": msd, "optim": osd}
                return dcp.async_save(sd, checkpoint_id=str(root / "dcp-warm" / str(i)), async_stager=stager)

            def floor(i: int) -> Any:
                at = 0
                for t in sources:
                    floor_buf[at : at + t.numel()].copy_(t)
                    at += t.numel()
                return None

            def timed(name: str, run: Any, i: int) -> None:
                barrier.wait()
                f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
                c0, t0 = time.thread_time(), time.perf_counter()
                h = run(i)
                block, cpu = time.perf_counter() - t0, time.thread_time() - c0
                faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0
                if h is not None:
                    h.result()
                e2e = time.perf_counter() - t0
                if i > 0:  # the first of each warms staging memory
                    timings.setdefault(name, []).append((block, e2e, cpu, faults))

            runs = {"ours": ours, "dcp": theirs, "dcp_warm": theirs_warm, "copy": floor}
            for i in range(reps + 1):  # forward, then reversed order (ABBA)
                for name in list(runs) if i % 2 == 0 else list(runs)[::-1]:
                    timed(name, runs[name], i)
            stager.close()
            for name, runs_of in timings.items():
                block, e2e, cpu, faults = zip(*runs_of, strict=True)
                res[f"{name}_block_s"] = statistics.median(block)
                res[f"{name}_e2e_s"] = statistics.median(e2e)
                res[f"{name}_cpu_s"] = statistics.median(cpu)
                res[f"{name}_faults"] = statistics.median(faults)
            # a replicated half: as much again in tensors every rank holds whole (DDP-style)
            sd = model.state_dict()
            torch.manual_seed(1)
            rep = {f"r{i}": torch.randn(v.shape) for i, v in enumerate(sd.values())}
            barrier.wait()
            ckpt.save(reps + 1, {"model": sd, "rep": Replicated(rep)}).result()
            dcp.save({"model": sd, "rep": rep}, checkpoint_id=str(root / "dcp-rep"))
            res["unique_rep_bytes"] = 2 * sum(v.numel() * 4 for v in sd.values())
        else:
            res = {"rank": rank, "needed": local_bytes()}
            last = root / "dcp" / str(args["repeats"])
            times, dtimes, reads, dreads = [], [], [], []
            for _ in range(reps):
                barrier.wait()
                r0, t0 = rchar(), time.perf_counter()
                assert ckpt.restore(step=args["repeats"], into=held) == args["repeats"]
                times.append(time.perf_counter() - t0)
                reads.append(rchar() - r0)
                got = [t.clone() for t in local_tensors()]
                barrier.wait()
                r0, t0 = rchar(), time.perf_counter()
                msd, osd = get_state_dict(model, optim)
                dcp.load({"model": msd, "optim": osd}, checkpoint_id=str(last))
                set_state_dict(model, optim, model_state_dict=msd, optim_state_dict=osd)
                dtimes.append(time.perf_counter() - t0)
                dreads.append(rchar() - r0)
            assert all(torch.equal(a, b) for a, b in zip(got, local_tensors(), strict=True))  # the same state
            res.update(
                ours_load_s=statistics.median(times),
                dcp_load_s=statistics.median(dtimes),
                ours_read=min(reads),
                dcp_read=min(dreads),
            )
    dist.destroy_process_group()
    out.put(res)


def run_fsdp(opts: argparse.Namespace) -> list[tuple[str, str, str, str, str]]:
    """The FSDP rows: save at 2 ranks, load at 2, 1 and 4 (ours and DCP side by side)."""
    try:
        import torch.distributed.checkpoint  # noqa: F401
    except ImportError:
        return [("FSDP2 vs torch.distributed.checkpoint", "-", missing("torch", "no torch"), "-", "-")]
    root = Path(tempfile.mkdtemp(prefix="ckpt-fsdp-"))
    nbytes = int(opts.fsdp_mib * (1 << 20))
    ctx = mp.get_context("spawn")

    def phase(name: str, world: int) -> list[dict[str, Any]]:
        args = {"phase": name, "bytes": nbytes, "dir": str(root), "repeats": opts.repeats, "port": free_port()}
        barrier, out = ctx.Barrier(world), ctx.Queue()
        procs = [ctx.Process(target=fsdp_worker, args=(r, world, args, barrier, out)) for r in range(world)]
        for p in procs:
            p.start()
        res = sorted((out.get(timeout=1800) for _ in procs), key=lambda r: r["rank"])
        for p in procs:
            p.join()
        return res

    rows: list[tuple[str, str, str, str, str]] = []

    def row(metric: str, ours: float, dcp: float, unit: str, ratio: float, target: str) -> None:
        rows.append((metric, f"{ours:.3f} {unit}", f"{dcp:.3f} {unit}", f"{ratio:.2f}x", target))

    saved = phase("save", 2)
    worst = lambda rs, k: max(r[k] for r in rs)  # noqa: E731
    row(
        "FSDP2+AdamW 2 ranks: save() blocking / DCP async_save",
        worst(saved, "ours_block_s"),
        worst(saved, "dcp_block_s"),
        "s",
        worst(saved, "ours_block_s") / worst(saved, "dcp_block_s"),
        "<= 0.5x",
    )
    row(
        "  save() blocking / DCP async_save with a kept stager",
        worst(saved, "ours_block_s"),
        worst(saved, "dcp_warm_block_s"),
        "s",
        worst(saved, "ours_block_s") / worst(saved, "dcp_warm_block_s"),
        "(info)",
    )
    row(
        "  save() blocking / torch copy_ of its bytes (floor)",
        worst(saved, "ours_block_s"),
        worst(saved, "copy_block_s"),
        "s",
        worst(saved, "ours_block_s") / worst(saved, "copy_block_s"),
        "(info)",
    )
    for anchor, label in (("dcp", "DCP async_save"), ("copy", "the copy")):
        row(
            f"  CPU time of the blocking call / {label}",
            worst(saved, "ours_cpu_s"),
            worst(saved, f"{anchor}_cpu_s"),
            "s",
            worst(saved, "ours_cpu_s") / worst(saved, f"{anchor}_cpu_s"),
            "(info)",
        )
    rows.append(
        (
            "  page faults in the blocking call, ours / DCP",
            f"{worst(saved, 'ours_faults'):.0f}",
            f"{worst(saved, 'dcp_faults'):.0f}",
            "-",
            "(info)",
        )
    )
    total = 2 * saved[0]["needed"]
    row(
        "  save throughput, ours / DCP (GB/s)",
        total / worst(saved, "ours_e2e_s") / 1e9,
        total / worst(saved, "dcp_e2e_s") / 1e9,
        "GB/s",
        worst(saved, "dcp_e2e_s") / worst(saved, "ours_e2e_s"),
        ">= 1.0x",
    )
    for world in (2, 1, 4):
        loaded = phase("load", world)
        label = "load 2 -> 2" if world == 2 else f"reshard load 2 -> {world}"
        row(
            f"  {label}: speed ours / DCP",
            worst(loaded, "ours_load_s"),
            worst(loaded, "dcp_load_s"),
            "s",
            worst(loaded, "dcp_load_s") / worst(loaded, "ours_load_s"),
            ">= 1.5x",
        )
        ratio = max(r["ours_read"] / r["needed"] for r in loaded)
        dratio = max(r["dcp_read"] / r["needed"] for r in loaded)
        rows.append(
            (
                f"  {label}: bytes read / needed (worst rank)",
                f"{ratio:.2f}x",
                f"DCP {dratio:.2f}x",
                f"{ratio:.2f}x",
                "<= 1.1x",
            )
        )
    unique = saved[0]["unique_rep_bytes"]
    steps = sorted((root / "ours" / "steps").iterdir())
    ours_rep = dir_bytes(steps[-1])
    dcp_rep = dir_bytes(root / "dcp-rep")
    rows.append(
        (
            "  bytes stored with a replicated half / unique",
            f"{ours_rep / unique:.3f}x",
            f"DCP {dcp_rep / unique:.3f}x",
            f"{ours_rep / unique:.3f}x",
            "1.0x",
        )
    )
    shutil.rmtree(root, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=1.0, help="total state size over all ranks")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--part-mib", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--bucket", default=None, help="bucket to use with AWS_ENDPOINT_URL")
    ap.add_argument(
        "--s3",
        choices=("seaweedfs", "ceph"),
        default=None,
        help="ceph: Ceph's RADOS Gateway (deploy/local/ceph-s3.sh up); seaweedfs: a private SeaweedFS",
    )
    ap.add_argument("--json", action="store_true", help="print raw per-rank results too")
    ap.add_argument("--fsdp-mib", type=float, default=128, help="FSDP2 model size for the DCP comparison")
    ap.add_argument(
        "--only",
        choices=("all", "s3", "fsdp"),
        default="all",
        help="run only the S3/anchor part or only the FSDP2-vs-DCP part",
    )
    opts = ap.parse_args()
    if opts.only == "fsdp":
        print_rows(
            f"checkpoint bench: FSDP2 {opts.fsdp_mib:.0f} MiB float32 vs torch.distributed.checkpoint, "
            f"{opts.repeats} repeats (medians; worst rank)",
            run_fsdp(opts),
        )
        return

    if opts.s3 == "ceph":
        ceph = CephS3.load()
        if ceph is None:
            raise SystemExit("--s3 ceph: Ceph's S3 is not up (sudo bash deploy/local/ceph-s3.sh up)")
        env, bucket, opts.server = ceph.env(), ceph.bucket, "Ceph RGW"
    elif os.environ.get("AWS_ENDPOINT_URL") and opts.s3 is None:
        env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
        bucket, opts.server = opts.bucket or "clusterctl", os.environ["AWS_ENDPOINT_URL"]
    else:
        seaweed = get_seaweed()
        env, bucket, opts.server = seaweed.env(), seaweed.bucket, "SeaweedFS"
    local_dir = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    args = {
        "env": env,
        "bucket": bucket,
        "prefix": f"bench/{uuid.uuid4().hex[:8]}",
        "job": uuid.uuid4().hex[:8],
        "bytes_per_rank": int(opts.size_gib * (1 << 30)) // opts.ranks,
        "repeats": opts.repeats,
        "part_mib": opts.part_mib,
        "concurrency": opts.concurrency,
        "port": free_port(),
        "local_dir": str(local_dir),
    }
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(opts.ranks), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, opts.ranks, args, barrier, out)) for r in range(opts.ranks)]
    for p in procs:
        p.start()
    results = sorted((out.get(timeout=3600) for _ in procs), key=lambda r: r["rank"])
    for p in procs:
        p.join()
    shutil.rmtree(local_dir, ignore_errors=True)
    report(results, opts)
    if opts.only == "all":
        print_rows(
            f"checkpoint bench: FSDP2 {opts.fsdp_mib:.0f} MiB float32 vs torch.distributed.checkpoint, "
            f"{opts.repeats} repeats (medians; worst rank)",
            run_fsdp(opts),
        )
    if opts.json:
        print(json.dumps(results, indent=2))


def report(rs: list[dict[str, Any]], opts: argparse.Namespace) -> None:
    total = sum(r["bytes"] for r in rs)
    gib = total / (1 << 30)

    def worst(key: str) -> float:
        return max(r[key] for r in rs)

    def gbps(seconds: float) -> float:
        return total / seconds / 1e9

    rows: list[tuple[str, str, str, str, str]] = []

    def row(metric: str, ours: str, anchor: str, ratio: float, target: str) -> None:
        rows.append((metric, ours, anchor, f"{ratio:.2f}x", target))

    row(
        "save() blocking vs np.copyto floor (steady)",
        f"{worst('ours_block_s'):.3f} s",
        f"{worst('copyto_s'):.3f} s",
        worst("ours_block_s") / worst("copyto_s"),
        "<= 1.5x",
    )
    row(
        "save() blocking, first save (page faults)",
        f"{worst('ours_cold_block_s'):.3f} s",
        f"{worst('copyto_s'):.3f} s",
        worst("ours_cold_block_s") / worst("copyto_s"),
        "(info)",
    )
    row(
        "naive np.savez+boto3 blocking / ours",
        f"{worst('ours_block_s'):.3f} s",
        f"{worst('naive_block_s'):.3f} s",
        worst("naive_block_s") / worst("ours_block_s"),
        ">= 20x",
    )
    if "s5cmd_up_s" not in rs[0]:
        for metric in ("upload throughput vs s5cmd cp (GB/s)", "verified restore vs s5cmd download (GB/s)"):
            rows.append((metric, "-", missing("s5cmd", "s5cmd not on PATH"), "-", "-"))
    else:
        row(
            "upload throughput vs s5cmd cp (GB/s)",
            f"{gbps(worst('ours_e2e_s')):.2f}",
            f"{gbps(worst('s5cmd_up_s')):.2f}",
            worst("s5cmd_up_s") / worst("ours_e2e_s"),
            ">= 0.9x",
        )
        row(
            "verified restore vs s5cmd download (GB/s)",
            f"{gbps(worst('ours_restore_s')):.2f}",
            f"{gbps(worst('s5cmd_down_s')):.2f}",
            worst("s5cmd_down_s") / worst("ours_restore_s"),
            ">= 0.8x",
        )
    per_rank = total / len(rs)
    row(
        "peak extra RSS during save / state (steady)",
        f"{worst('rss_extra_steady') / (1 << 20):.0f} MiB",
        f"{per_rank / (1 << 20):.0f} MiB",
        worst("rss_extra_steady") / per_rank,
        "<= 1.3x",
    )
    row(
        "peak extra RSS during first save / state",
        f"{worst('rss_extra_cold') / (1 << 20):.0f} MiB",
        f"{per_rank / (1 << 20):.0f} MiB",
        worst("rss_extra_cold") / per_rank,
        "(info)",
    )
    slow = min(rs, key=lambda r: r["loop_busy"] / r["loop_idle"])
    row(
        "loop steps/s during S3 upload vs idle (worst rank)",
        f"{slow['loop_busy']:.0f}",
        f"{slow['loop_idle']:.0f}",
        slow["loop_busy"] / slow["loop_idle"],
        "(info)",
    )
    slow = min(rs, key=lambda r: r["loop_busy_local"] / r["loop_idle"])
    row(
        "  same, saving to a local dir (no S3 server)",
        f"{slow['loop_busy_local']:.0f}",
        f"{slow['loop_idle']:.0f}",
        slow["loop_busy_local"] / slow["loop_idle"],
        "(info)",
    )
    if "dcp_block_s" not in rs[0]:
        for metric in ("DCP async_save blocking / ours (local dir)", "local dir throughput ours vs DCP (GB/s)"):
            rows.append((metric, "-", missing("torch", "no torch"), "-", "-"))
    else:
        row(
            "DCP async_save blocking / ours (local dir)",
            f"{worst('local_block_s'):.3f} s",
            f"{worst('dcp_block_s'):.3f} s",
            worst("dcp_block_s") / worst("local_block_s"),
            "(higher = ours faster)",
        )
        row(
            "local dir throughput ours vs DCP (GB/s)",
            f"{gbps(worst('local_e2e_s')):.2f}",
            f"{gbps(worst('dcp_e2e_s')):.2f}",
            worst("dcp_e2e_s") / worst("local_e2e_s"),
            "(higher = ours faster)",
        )
    print_rows(
        f"checkpoint bench: {gib:.2f} GiB float32, {len(rs)} ranks, {opts.repeats} repeats, S3 {opts.server} "
        "(medians; worst rank)",
        rows,
    )


def print_rows(title: str, rows: list[tuple[str, str, str, str, str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("metric", "ours", "anchor", "ratio", "target"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for r in rows:
        table.add_row(*r)
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
